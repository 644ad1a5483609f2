// Who a failure points at. The first worker to fail is often a victim: it timed out waiting for
// a rank that is stopped (SIGSTOP, a debugger), stuck or gone. Two kinds of evidence say so:
//   - the failure record ddp's core leaves in the job's store (records/failure_record.h): the ranks
//     the failed worker waited for (lost, behind, still inside the op), or the rank whose earlier
//     failure it follows. Data, not text: rewording an error changes nothing here.
//   - ddprun sees which of its own workers are stopped (state T or t in /proc/PID/stat).
// Pure functions of that evidence, apart from stopped_state().
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "records/failure_record.h"

namespace ddp::launcher {

// A global rank's failure record, if it left one (read from the job's store).
using FailureLookup = std::function<std::optional<detail::FailureRecord>(int rank)>;

// The global ranks `failed_rank`'s record says it waited for. A record that follows rank N's
// earlier failure points past N to whom N waited for, or to N.
std::vector<int> ranks_waited_for(int failed_rank, const FailureLookup& records);

// Whether a line of output says a timeout (any program's: no record needed): cheap, for every line.
bool mentions_timeout(std::string_view line);

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
// the failed worker's record names; else the first rank that record names; else a stopped local
// worker, when the failure was a timeout (its record's kind, or a line of `error_lines`, the
// failed worker's lines that mentions_timeout kept) that names no rank.
std::optional<Culprit> find_root_cause(int failed_rank, const FailureLookup& records,
                                       const std::vector<std::string>& error_lines,
                                       const std::vector<SuspendedWorker>& suspended);

// The state letter in a /proc/PID/stat text (R, S, D, T, t, Z, ...), or 0 when unreadable.
char stat_state(std::string_view stat_text);

// The state letter of process `pid` now (from /proc/PID/stat), or 0 when it is gone.
char process_state(pid_t pid);

// "suspended (state T in /proc/PID/stat)" or "suspended by a debugger (...)" when `pid` is stopped
// now; nullopt otherwise (running, sleeping, gone).
std::optional<std::string> stopped_state(pid_t pid);

}  // namespace ddp::launcher
