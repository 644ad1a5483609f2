// The flight recorder's settings, from the environment: how many operations each process keeps
// and where it writes its dump. Pure functions of a variable lookup (docs/FLIGHT_RECORDER.md).
#pragma once

#include <cstddef>
#include <string>

#include "ddp/detail/launch_env.h"

namespace ddp::detail {

inline constexpr const char* kFlightRecorderVariable = "DDP_FLIGHT_RECORDER";  // N entries; 0: off
inline constexpr const char* kFlightDirVariable = "DDP_FLIGHT_RECORDER_DIR";   // where dumps go
inline constexpr std::size_t kDefaultFlightCapacity = 2048;
inline constexpr std::size_t kMaxFlightCapacity = 100000;  // about 15 MB of dump

// DDP_FLIGHT_RECORDER: unset or empty, the default; 0 turns the recorder off. Throws
// InvalidArgument naming the variable, its value and what it takes.
std::size_t flight_capacity(const EnvLookup& env);

// The job id a dump carries: DDP_JOB_ID, else TORCHELASTIC_RUN_ID, else "".
std::string flight_job(const EnvLookup& env);

// The folder of this process's dump: DDP_FLIGHT_RECORDER_DIR when set (ddprun sets it to
// <--log_dir>/<run id>/attempt_<N>), else ${TMPDIR:-/tmp}/ddp-flight-<uid>/<job>/attempt_<N>,
// where <job> is flight_job() or, without one, "port-<MASTER_PORT>" (else "pid-<pid>") and <N>
// is TORCHELASTIC_RESTART_COUNT (0 when unset).
std::string flight_dir(const EnvLookup& env, unsigned uid, long pid);

// <dir>/rank_<rank>.flight
std::string flight_dump_path(const std::string& dir, int rank);

}  // namespace ddp::detail
