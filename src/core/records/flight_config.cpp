#include "records/flight_config.h"

#include "util/strings.h"
#include "store/store_variables.h"

namespace ddp::detail {

void read_flight_capacity(FlightSettings& s, std::string_view name, const std::string& value,
                          VariableProblems& problems) {
  const auto n = parse_int(value);
  if (n && *n >= 0 && static_cast<std::size_t>(*n) <= kMaxFlightCapacity) {
    s.capacity = static_cast<std::size_t>(*n);
  } else if (problems.invalid.empty()) {
    problems.invalid = cat(name, "=", quote(value), " is not a number of operations from 0 to ", kMaxFlightCapacity,
                           ": set it to how many of its last collectives each rank keeps for its flight recorder "
                           "dump (default ",
                           kDefaultFlightCapacity, "), or 0 to turn it off");
  }
}

std::string flight_job_id(const EnvLookup& env) {
  VariableProblems ignored;  // text
  return read_variables(kStoreVariables, env, ignored).job_id;
}

std::string flight_dir(const EnvLookup& env, unsigned uid, long pid) {
  VariableProblems ignored;  // the folder is text; a bad capacity is the recorder's to report
  const FlightSettings flight = read_variables(kFlightVariables, env, ignored);
  if (!flight.dir.empty()) return flight.dir;
  std::string job = flight_job_id(env);
  if (job.empty()) {
    auto port = env("MASTER_PORT");
    job = port && !port->empty() ? "port-" + *port : cat("pid-", pid);
  }
  for (char& c : job) {
    if (c == '/' || c == '\0') c = '_';
  }
  const auto restart = env("TORCHELASTIC_RESTART_COUNT");
  const auto attempt = restart ? parse_int(*restart).value_or(0) : 0;
  const auto tmp = env("TMPDIR");
  return cat(tmp && !tmp->empty() ? *tmp : std::string("/tmp"), "/ddp-flight-", uid, "/", job, "/attempt_", attempt);
}

std::string flight_dump_path(const std::string& dir, int rank) { return cat(dir, "/rank_", rank, ".flight"); }

}  // namespace ddp::detail
