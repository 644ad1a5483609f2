// The environment of one worker: what torchrun sets, plus what ddp's own store client needs.
// A pure function of the job, the worker's place in it, and ddprun's own environment.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "cli/environment.h"
#include "cli/options.h"

namespace ddp::launcher {

struct WorkerPlace {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;  // GROUP_RANK
  int nnodes = 1;     // GROUP_WORLD_SIZE
  int restart_count = 0;
};

struct JobEnv {
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  std::string role = "default";
  int max_restarts = 0;
  std::string error_file;                        // TORCHELASTIC_ERROR_FILE when not empty
  std::string checkpoint_record;                 // DDP_CHECKPOINT_RECORD when not empty (see checkpoint_record.h)
  std::string straggler_report;                  // DDP_STRAGGLER_REPORT when not empty (likewise)
  AccelerateFlags accelerate;                    // ACCELERATE_* for the flags given
  std::optional<std::string> openblas_coretype;  // OPENBLAS_CORETYPE unless ddprun's environment has one (openblas.h)
};

// The variables to set on top of ddprun's environment `parent`:
//   RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK
//   ROLE_WORLD_SIZE ROLE_NAME MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT
//   TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE=True
//   DDP_STORE_PROTOCOL=ddp, DDP_CHECKPOINT_RECORD and TORCHELASTIC_ERROR_FILE when the job
//   names them, and when `parent` lacks them: NCCL_ASYNC_ERROR_HANDLING=1,
//   OMP_NUM_THREADS=1 (with more than one worker per node; see needs_omp_default),
//   OPENBLAS_CORETYPE when the job names one.
//   For the Accelerate flags given (and only those): ACCELERATE_MIXED_PRECISION,
//   ACCELERATE_GRADIENT_ACCUMULATION_STEPS, ACCELERATE_USE_CPU=true.
std::map<std::string, std::string> worker_environment(const WorkerPlace& place, const JobEnv& job,
                                                      const EnvLookup& parent);

// torchrun's rule: OMP_NUM_THREADS=1 for each worker when it is unset and a node runs more than
// one worker (ddprun prints a note when it applies it).
bool needs_omp_default(const EnvLookup& parent, int local_world_size);

}  // namespace ddp::launcher
