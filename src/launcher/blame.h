// Who a failure points at. The first worker to fail is often a victim: it timed out waiting for
// a rank that is stopped (SIGSTOP, a debugger), stuck or gone. Two kinds of evidence say so:
//   - ddp's diagnosis in the failed worker's error names the ranks it waited for ("Ranks that
//     had not reached all_reduce #7: rank 1: ...", "still inside it: rank 1", "Lost rank 1",
//     "waited for rank 1 (pid 42), which did not arrive", "Rank 1 failed first: ..."),
//   - ddprun sees which of its own workers are stopped (state T or t in /proc/PID/stat).
// Pure functions of that evidence, apart from stopped_state().
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

// The global ranks `text` (a worker's error output) says its rank waited for, in the order
// named. "Rank N failed first: <N's error>" points past N to whom N waited for, or to N.
std::vector<int> ranks_waited_for(std::string_view text);

// Whether a line of output may hold evidence (a diagnosis, or a timeout): cheap, for every line.
bool may_name_ranks_waited_for(std::string_view line);

// A local worker found stopped when a peer failed.
struct SuspendedWorker {
  int rank = -1;
  std::string state;  // what ddprun saw, e.g. "suspended (state T in /proc/4242/stat)"
};

struct Culprit {
  int rank = -1;
  std::string evidence;  // how ddprun knows, one or two sentences
};

// The rank the evidence points at instead of `failed_rank`, if any: a stopped local worker that
// the failed worker's error names; else the first rank that error names; else a stopped local
// worker, when the error is a timeout that names no rank. `error_lines`: the failed worker's
// lines that may_name_ranks_waited_for kept.
std::optional<Culprit> find_root_cause(int failed_rank, const std::vector<std::string>& error_lines,
                                       const std::vector<SuspendedWorker>& suspended);

// The state letter in a /proc/PID/stat text (R, S, D, T, t, Z, ...), or 0 when unreadable.
char stat_state(std::string_view stat_text);

// The state letter of process `pid` now (from /proc/PID/stat), or 0 when it is gone.
char process_state(pid_t pid);

// "suspended (state T in /proc/PID/stat)" or "suspended by a debugger (...)" when `pid` is stopped
// now; nullopt otherwise (running, sleeping, gone).
std::optional<std::string> stopped_state(pid_t pid);

}  // namespace ddp::launcher
