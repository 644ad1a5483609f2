// The flight recorder's variables: how many operations it keeps and where it writes its dumps.
// Pure functions of a variable lookup (docs/FLIGHT_RECORDER.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "util/launch_env.h"
#include "util/variables.h"

namespace ddp::detail {

inline constexpr std::size_t kDefaultFlightCapacity = 2048;
inline constexpr std::size_t kMaxFlightCapacity = 100000;  // about 15 MB of dump

struct FlightSettings {
  std::size_t capacity = kDefaultFlightCapacity;  // 0: off
  std::string dir;                                // "": flight_dir's default
};

// A capacity that is not a number from 0 to kMaxFlightCapacity is invalid (not a warning): the
// user asked for a recorder and would silently get another.
void read_flight_capacity(FlightSettings& s, std::string_view name, const std::string& value,
                          VariableProblems& problems);

inline constexpr std::string_view kFlightRecorderVariable = "DDP_FLIGHT_RECORDER";
inline constexpr std::string_view kFlightDirVariable = "DDP_FLIGHT_RECORDER_DIR";
inline constexpr Variable<FlightSettings> kFlightVariables[] = {
    {kFlightRecorderVariable, "how many operations the flight recorder keeps (default 2048, 0 off)",
     read_flight_capacity},
    {kFlightDirVariable, "where the flight recorder's dumps go", read_text<FlightSettings, &FlightSettings::dir>},
};

// The folder of this process's dump: DDP_FLIGHT_RECORDER_DIR when set (ddprun sets it to
// <--log_dir>/<run id>/attempt_<N>), else ${TMPDIR:-/tmp}/ddp-flight-<uid>/<job>/attempt_<N>,
// where <job> is the job id (DDP_JOB_ID, else TORCHELASTIC_RUN_ID) or, without one,
// "port-<MASTER_PORT>" (else "pid-<pid>") and <N> is TORCHELASTIC_RESTART_COUNT (0 when unset).
std::string flight_dir(const EnvLookup& env, unsigned uid, long pid);

// The job the dumps name: DDP_JOB_ID, else TORCHELASTIC_RUN_ID; "" without one.
std::string flight_job_id(const EnvLookup& env);

// <dir>/rank_<rank>.flight
std::string flight_dump_path(const std::string& dir, int rank);

}  // namespace ddp::detail
