// One worker's output: its stdout and stderr, split into whole lines, go to the console with a
// "[rank]:" prefix (each line in one write, so lines of different workers never mix), to its
// log file, and into a short tail kept for the failure summary. A stdout that is a terminal
// (live_stdout) is read as a terminal shows it: '\r' redraws the line, and the unfinished line
// is the console's live line.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "workers/console.h"
#include "workers/line_splitter.h"
#include "net/socket.h"

namespace ddp::launcher {

enum class Stream { Out = 0, Err = 1 };

struct WorkerOutputOptions {
  int rank = 0;
  std::string log_path;            // empty: no log file; else created (with its folders) and truncated
  bool console[2] = {true, true};  // show stdout / stderr on the console
  int console_fd[2] = {1, 2};      // where the console lines go
  std::size_t tail_lines = 20;     // lines kept for the summary
  std::size_t tail_line_bytes = 400;
  bool live_stdout = false;   // stdout is a terminal of its own (see above)
  Console* screen = nullptr;  // the Console lines go through, shared by a node's workers; null: its own
  // Lines for which `keep` is true are kept whole (the last `kept_lines`, up to kept_line_bytes
  // each), e.g. a long error that the tail would cut short.
  std::function<bool(std::string_view)> keep;
  std::size_t kept_lines = 4;
  std::size_t kept_line_bytes = 16 * 1024;
};

class WorkerOutput {
 public:
  // Throws ddp::IOError naming the path when the log file cannot be created.
  explicit WorkerOutput(WorkerOutputOptions options);
  WorkerOutput(const WorkerOutput&) = delete;  // it may point at a Console of its own
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  void on_data(Stream stream, std::string_view bytes);
  void on_eof(Stream stream);

  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }
  std::vector<std::string> kept() const { return {kept_.begin(), kept_.end()}; }
  const std::string& log_path() const { return options_.log_path; }

 private:
  void on_line(Stream stream, std::string_view line);

  WorkerOutputOptions options_;
  Console own_console_;
  Console* console_;
  std::string prefix_;
  LineSplitter splitter_[2];
  detail::Fd log_;
  std::deque<std::string> tail_;
  std::deque<std::string> kept_;
  std::string scratch_;
};

// Writes all of `data` to `fd` (a console or a file), retrying short writes; errors are ignored
// (a closed console must not stop the job).
void write_fully(int fd, std::string_view data);

// Creates `path` and its missing parent folders (mkdir -p). Throws ddp::IOError naming the path.
void make_directories(const std::string& path);

}  // namespace ddp::launcher
