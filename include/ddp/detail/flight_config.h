// Where the flight recorder writes its dumps (how many operations it keeps is a setting:
// ddp/detail/settings.h). Pure functions of a variable lookup (docs/FLIGHT_RECORDER.md).
#pragma once

#include <cstddef>
#include <string>

#include "ddp/detail/launch_env.h"

namespace ddp::detail {

inline constexpr const char* kFlightRecorderVariable = "DDP_FLIGHT_RECORDER";  // N entries; 0: off
inline constexpr const char* kFlightDirVariable = "DDP_FLIGHT_RECORDER_DIR";   // where dumps go
// The folder of this process's dump: DDP_FLIGHT_RECORDER_DIR when set (ddprun sets it to
// <--log_dir>/<run id>/attempt_<N>), else ${TMPDIR:-/tmp}/ddp-flight-<uid>/<job>/attempt_<N>,
// where <job> is the job id (DDP_JOB_ID, else TORCHELASTIC_RUN_ID) or, without one, "port-<MASTER_PORT>" (else "pid-<pid>") and <N>
// is TORCHELASTIC_RESTART_COUNT (0 when unset).
std::string flight_dir(const EnvLookup& env, unsigned uid, long pid);

// <dir>/rank_<rank>.flight
std::string flight_dump_path(const std::string& dir, int rank);

}  // namespace ddp::detail
