// Splits a byte stream into whole lines, so that each worker line reaches the console in one
// write with its prefix and no two workers' text ever shares a line.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ddp::launcher {

class LineSplitter {
 public:
  using Emit = std::function<void(std::string_view line)>;

  // A line longer than `max_line` bytes is emitted in pieces of `max_line` (so that a worker
  // printing without newlines cannot make ddprun buffer without bound). `carriage_return`: as
  // a terminal shows it, a '\r' (not followed by '\n') starts the line over, so that a progress
  // bar redrawn in place is one line holding its newest text; "\r\n" ends a line as '\n' does.
  explicit LineSplitter(std::size_t max_line = 64 * 1024, bool carriage_return = false)
      : max_line_(max_line), carriage_return_(carriage_return) {}

  // Appends `bytes`; emits each line completed by them, without its '\n'.
  void feed(std::string_view bytes, const Emit& emit);
  // The stream ended: emits the unfinished last line, if there is one.
  void finish(const Emit& emit);
  // Bytes held back, waiting for their '\n': the unfinished line.
  std::size_t pending() const { return partial_.size(); }
  const std::string& partial() const { return partial_; }

 private:
  void feed_terminal(std::string_view bytes, const Emit& emit);

  std::size_t max_line_;
  bool carriage_return_;
  bool after_cr_ = false;  // the last byte was a '\r'
  std::string partial_;
};

}  // namespace ddp::launcher
