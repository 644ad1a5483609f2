// What each of this node's workers runs in a round: its environment (worker_env.h), where its
// output goes (console, log file, a terminal for local rank 0), what of it is kept, and where
// their flight recorder dumps go.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reports/checkpoint_record.h"
#include "cli/command.h"
#include "cli/job_config.h"
#include "rendezvous/rendezvous.h"
#include "workers/worker_group.h"

namespace ddp::launcher {

struct RoundPlan {
  const JobConfig& config;
  const Command& command;
  const Membership& membership;  // this node's place in the round
  int round = 0;                 // TORCHELASTIC_RESTART_COUNT, and the log folder attempt_<round>
  int port = 0;                  // the store's
  const CheckpointRecords& records;
  int terminal_width = 0;                        // of ddprun's stdout when it is a terminal, else 0
  std::optional<std::string> openblas_coretype;  // for the workers (openblas.h)
};

struct RoundWorkers {
  std::vector<WorkerSpec> specs;
  std::string flight_dir;  // where their flight recorder dumps go (flight_report.h)
};

RoundWorkers worker_specs(const RoundPlan& plan);

}  // namespace ddp::launcher
