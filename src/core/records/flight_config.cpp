#include "ddp/detail/flight_config.h"

#include "ddp/error.h"
#include "ddp/detail/strings.h"

namespace ddp::detail {

std::size_t flight_capacity(const EnvLookup& env) {
  const auto value = env(kFlightRecorderVariable);
  if (!value || value->empty()) return kDefaultFlightCapacity;
  const auto n = parse_int(*value);
  if (!n || *n < 0 || static_cast<std::size_t>(*n) > kMaxFlightCapacity) {
    throw InvalidArgument(cat(kFlightRecorderVariable, "=", quote(*value), " is not a number of operations from 0 to ",
                              kMaxFlightCapacity,
                              ": set it to how many of its last collectives each rank keeps for "
                              "its flight recorder dump (default ",
                              kDefaultFlightCapacity, "), or 0 to turn it off"));
  }
  return static_cast<std::size_t>(*n);
}

std::string flight_job(const EnvLookup& env) {
  for (const char* name : {"DDP_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    if (auto value = env(name); value && !value->empty()) return *value;
  }
  return "";
}

std::string flight_dir(const EnvLookup& env, unsigned uid, long pid) {
  if (auto dir = env(kFlightDirVariable); dir && !dir->empty()) return *dir;
  std::string job = flight_job(env);
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
