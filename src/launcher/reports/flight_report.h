// ddprun's part of the flight recorder (docs/FLIGHT_RECORDER.md): it points each worker's dump at
// the attempt's log folder, and after a failed attempt reads this node's dumps and prints what
// they say, below its failure summary.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli/environment.h"

namespace ddp::launcher {

// With --log_dir (`attempt_dir` not empty) and no DDP_FLIGHT_RECORDER_DIR of the user's, sets the
// worker's DDP_FLIGHT_RECORDER_DIR to the attempt's log folder. Returns the folder the worker's
// dump goes to (what the worker computes from `env` over `parent`).
std::string point_flight_dumps(std::map<std::string, std::string>& env, const std::string& attempt_dir,
                               const EnvLookup& parent);

// The lines that follow the failure summary: what the dumps in `folder` say, the ranks of other
// nodes (of `world_size`, all but `local_ranks`) being elsewhere; "" when the folder holds none.
std::string format_flight_report(const std::string& folder, const std::vector<int>& local_ranks, int world_size);

}  // namespace ddp::launcher
