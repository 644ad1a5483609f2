// The reports ddprun prints at the end of an attempt that did not succeed: the failure summary
// (the root cause, on any node, with its last lines and log file, then how each of this node's
// workers ended) and the stop report (a requested stop: who asked, how the workers ended, the
// last checkpoint and the command that resumes from it). Pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/attempt_end.h"
#include "reports/checkpoint_record.h"
#include "workers/worker_exit.h"

namespace ddp::launcher {

struct SummaryInput {
  AttemptEnd root;                // the first failure of the attempt
  std::vector<WorkerExit> local;  // this node's workers
  int node_rank = 0;
  std::string host;
  int attempt = 0;  // 0-based (TORCHELASTIC_RESTART_COUNT)
  int max_restarts = 0;
  bool restarting = false;           // another attempt follows
  std::vector<std::string> history;  // an elastic job's membership changes so far, a line each
  std::string straggler;             // the job's last straggler report (rank 0's), if any
};

// A block of lines, framed by rules, ending in '\n'.
std::string format_summary(const SummaryInput& input);

struct StopInput {
  int signal = 0;    // the signal that stopped the job
  std::string what;  // who received it, e.g. "ddprun on node 1 (host h, pid 7) received SIGINT and stopped the job"
  std::vector<WorkerExit> local;  // this node's workers (none when the stop came between attempts)
  int node_rank = 0;
  std::string host;
  std::chrono::milliseconds grace_period{0};
  std::optional<CheckpointRecord> checkpoint;  // the newest one this node's workers recorded
  std::string command;                         // ddprun's command line, to run again
  std::vector<std::string> history;            // an elastic job's membership changes so far
  std::string straggler;                       // the job's last straggler report (rank 0's), if any
};

// A block of lines, framed by rules, ending in '\n'.
std::string format_stop_report(const StopInput& input);

// "Last straggler report: <report>\n", or nothing for an empty one.
std::string describe_straggler(const std::string& report);

}  // namespace ddp::launcher
