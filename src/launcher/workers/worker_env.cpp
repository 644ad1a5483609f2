#include "workers/worker_env.h"

#include "reports/checkpoint_record.h"

namespace ddp::launcher {

bool needs_omp_default(const EnvLookup& parent, int local_world_size) {
  return local_world_size > 1 && !parent("OMP_NUM_THREADS");
}

std::map<std::string, std::string> worker_environment(const WorkerPlace& place, const JobEnv& job,
                                                      const EnvLookup& parent) {
  auto text = [](int value) { return std::to_string(value); };
  std::map<std::string, std::string> env = {
      {"RANK", text(place.rank)},
      {"LOCAL_RANK", text(place.local_rank)},
      {"WORLD_SIZE", text(place.world_size)},
      {"LOCAL_WORLD_SIZE", text(place.local_world_size)},
      {"GROUP_RANK", text(place.node_rank)},
      {"GROUP_WORLD_SIZE", text(place.nnodes)},
      // One role per job: a worker's rank in its role is its rank.
      {"ROLE_RANK", text(place.rank)},
      {"ROLE_WORLD_SIZE", text(place.world_size)},
      {"ROLE_NAME", job.role},
      {"MASTER_ADDR", job.master_addr},
      {"MASTER_PORT", text(job.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", text(place.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", text(job.max_restarts)},
      {"TORCHELASTIC_RUN_ID", job.run_id},
      // Every worker is a client of the store ddprun hosts (rank 0 hosts none).
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      // ddp's client speaks ddp's own protocol to ddprun's store (under torchrun, PyTorch's).
      {"DDP_STORE_PROTOCOL", "ddp"},
  };
  // A string, not a literal assigned over the map's new empty value: GCC 12 warns (-Wrestrict) on
  // that assignment in a Release build.
  if (!parent("NCCL_ASYNC_ERROR_HANDLING")) env.insert_or_assign("NCCL_ASYNC_ERROR_HANDLING", std::string("1"));
  if (needs_omp_default(parent, place.local_world_size)) env.insert_or_assign("OMP_NUM_THREADS", std::string("1"));
  if (job.openblas_coretype && !parent("OPENBLAS_CORETYPE")) env["OPENBLAS_CORETYPE"] = *job.openblas_coretype;
  if (!job.error_file.empty()) env["TORCHELASTIC_ERROR_FILE"] = job.error_file;
  if (!job.checkpoint_record.empty()) env[kCheckpointRecordVariable] = job.checkpoint_record;
  if (!job.straggler_report.empty()) env[kStragglerReportVariable] = job.straggler_report;
  // Accelerate's launcher's names. A flag not given sets nothing, so a value exported in ddprun's
  // environment (e.g. by a job script) still reaches the workers.
  const AccelerateFlags& accelerate = job.accelerate;
  if (accelerate.mixed_precision) env["ACCELERATE_MIXED_PRECISION"] = *accelerate.mixed_precision;
  if (accelerate.gradient_accumulation_steps) {
    env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] = text(*accelerate.gradient_accumulation_steps);
  }
  if (accelerate.cpu) env["ACCELERATE_USE_CPU"] = "true";
  return env;
}

}  // namespace ddp::launcher
