// How a worker ended: what the summary prints and what one node tells the others.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ddp::launcher {

struct WorkerExit {
  int rank = -1;
  int local_rank = -1;
  int node_rank = 0;
  std::string host;
  long pid = 0;
  int exit_code = -1;                          // when it exited
  int signal = 0;                              // when a signal ended it
  bool stopped = false;                        // ddprun had asked it to stop before it ended (not a failure of its own)
  std::chrono::system_clock::time_point time;  // when ddprun saw it end
  std::vector<std::string> last_lines;         // its last lines of output (stdout and stderr)
  std::string log_file;                        // empty: none
  std::string suspended;  // when ddprun found it stopped (SIGSTOP, a debugger) at the attempt's end: what it saw

  bool failed() const { return signal != 0 || exit_code != 0; }
  // "exit code 3" or "signal SIGSEGV (11)".
  std::string status() const;
};

// "SIGSEGV" (or "signal 42" for one without a name).
std::string signal_name(int signal);

// "2024-05-01 12:00:03" in local time.
std::string format_time(std::chrono::system_clock::time_point time);

}  // namespace ddp::launcher
