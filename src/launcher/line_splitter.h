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
  // printing without newlines cannot make ddprun buffer without bound).
  explicit LineSplitter(std::size_t max_line = 64 * 1024) : max_line_(max_line) {}

  // Appends `bytes`; emits each line completed by them, without its '\n'.
  void feed(std::string_view bytes, const Emit& emit);
  // The stream ended: emits the unfinished last line, if there is one.
  void finish(const Emit& emit);
  // Bytes held back, waiting for their '\n'.
  std::size_t pending() const { return partial_.size(); }

 private:
  std::size_t max_line_;
  std::string partial_;
};

}  // namespace ddp::launcher
