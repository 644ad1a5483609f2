// The report ddprun prints when an attempt fails: the root cause (the first failure, on any
// node) with its last lines and log file, then how each of this node's workers ended.
#pragma once

#include <string>
#include <vector>

#include "attempt_end.h"
#include "worker_exit.h"

namespace ddp::launcher {

struct SummaryInput {
  AttemptEnd root;                // the first failure of the attempt
  std::vector<WorkerExit> local;  // this node's workers
  int node_rank = 0;
  std::string host;
  int attempt = 0;  // 0-based (TORCHELASTIC_RESTART_COUNT)
  int max_restarts = 0;
  bool restarting = false;  // another attempt follows
};

// A block of lines, framed by rules, ending in '\n'.
std::string format_summary(const SummaryInput& input);

}  // namespace ddp::launcher
