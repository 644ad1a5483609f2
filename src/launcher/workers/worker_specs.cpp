#include "workers/worker_specs.h"

#include <algorithm>

#include "reports/blame.h"
#include "cli/environment.h"
#include "reports/flight_report.h"
#include "util/strings.h"
#include "workers/worker_env.h"

namespace ddp::launcher {

using detail::cat;

namespace {

// A run id as one folder name.
std::string safe_name(std::string text) {
  for (char& c : text) {
    if (c == '/' || c == '\0') c = '_';
  }
  return text;
}

}  // namespace

RoundWorkers worker_specs(const RoundPlan& plan) {
  RoundWorkers workers;
  auto& specs = workers.specs;
  const auto parent = process_env();
  JobEnv job;
  job.master_addr = plan.config.master_addr;
  job.master_port = plan.port;
  job.run_id = plan.config.run_id;
  job.role = plan.config.role;
  job.max_restarts = plan.config.max_restarts;
  job.accelerate = plan.config.accelerate;
  job.openblas_coretype = plan.openblas_coretype;
  const std::string attempt_dir =
      plan.config.log_dir.empty()
          ? ""
          : cat(plan.config.log_dir, "/", safe_name(plan.config.run_id), "/attempt_", plan.round);
  for (int local = 0; local < plan.config.nproc; ++local) {
    WorkerPlace place;
    place.rank = plan.membership.rank_offset() + local;
    place.local_rank = local;
    place.world_size = plan.membership.world_size();
    place.local_world_size = plan.config.nproc;
    place.node_rank = plan.membership.node_rank;
    place.nnodes = plan.membership.nnodes;
    place.restart_count = plan.round;
    if (!attempt_dir.empty()) job.error_file = cat(attempt_dir, "/rank_", place.rank, ".error.json");
    job.checkpoint_record = plan.records.path_for(place.rank);
    job.straggler_report = plan.records.straggler_path();
    WorkerSpec spec;
    spec.rank = place.rank;
    spec.local_rank = local;
    spec.node_rank = plan.membership.node_rank;
    spec.path = plan.command.path;
    spec.argv = plan.command.argv;
    spec.env = worker_environment(place, job, parent);
    workers.flight_dir = point_flight_dumps(spec.env, attempt_dir, parent);
    spec.output.rank = place.rank;
    if (!attempt_dir.empty()) spec.output.log_path = cat(attempt_dir, "/rank_", place.rank, ".log");
    bool shown = true;
    if (plan.config.local_ranks_filter) {
      const auto& f = *plan.config.local_ranks_filter;
      shown = std::find(f.begin(), f.end(), local) != f.end();
    }
    const int redirected = plan.config.redirects.for_local_rank(local);
    const int teed = plan.config.tee.for_local_rank(local);
    for (int s = 0; s < 2; ++s) {
      const int bit = 1 << s;
      spec.output.console[s] = shown && (!(redirected & bit) || (teed & bit));
    }
    spec.output.keep = mentions_timeout;  // find_root_cause's evidence of a timeout without a record
    if (local == 0 && plan.terminal_width > 0 && spec.output.console[0]) {
      spec.terminal_columns = plan.terminal_width - static_cast<int>(cat("[", place.rank, "]:").size());
      spec.output.live_stdout = true;
    }
    specs.push_back(std::move(spec));
  }
  return workers;
}

}  // namespace ddp::launcher
