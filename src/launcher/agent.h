// One node's ddprun: hosts or joins the job's store, forms the job with the other nodes, and runs
// attempts of its workers in step with them until the job succeeds, fails for good, or is
// interrupted.
#pragma once

#include "command.h"
#include "job_config.h"
#include "orphan_guard.h"
#include "signals.h"

namespace ddp::launcher {

// Runs the job; returns ddprun's exit status: 0 (every worker succeeded), 1 (the job failed),
// 128+N (stopped by signal N). Throws InvalidArgument for bad input found before any worker
// started (the port in use), and ddp::Error when the job cannot form (nodes missing, another
// job's store at the address).
int run_agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard);

}  // namespace ddp::launcher
