#include "ddp/detail/flight_config.h"

#include "ddp/detail/settings.h"

#include "ddp/error.h"
#include "ddp/detail/strings.h"

namespace ddp::detail {

std::string flight_dir(const EnvLookup& env, unsigned uid, long pid) {
  const Settings settings = read_settings(env);
  if (!settings.flight_dir.empty()) return settings.flight_dir;
  std::string job = settings.job_id;
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
