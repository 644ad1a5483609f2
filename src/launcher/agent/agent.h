// One node's ddprun: hosts or joins the job's store, forms the job with the other nodes, and runs
// attempts of its workers in step with them until the job succeeds, fails for good, or is
// interrupted.
#pragma once

#include <string>

#include "cli/command.h"
#include "cli/job_config.h"
#include "workers/orphan_guard.h"
#include "workers/signals.h"

namespace ddp::launcher {

// Writes "ddprun: TEXT" on stderr, in one write.
void say(const std::string& text);

// Runs the job; returns ddprun's exit status: 0 (every worker succeeded), 1 (the job failed),
// 128+N (stopped by signal N). Throws InvalidArgument for bad input found before any worker
// started (the port in use), and ddp::Error when the job cannot form (nodes missing, another
// job's store at the address).
int run_agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard);

}  // namespace ddp::launcher
