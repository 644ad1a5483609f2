// The flight recorder's dumps on signals: SIGUSR1 asks for one, and SIGTERM (what ddprun,
// torchrun, Slurm and Kubernetes send to stop a worker, as when another worker failed) gets one
// before it ends the process.
#pragma once

#include <functional>
#include <string>

namespace ddp::detail {

// Takes SIGUSR1 and SIGTERM where they are at their default (a program's own handlers are left
// alone) and calls `dump` with the reason on a thread of its own when one arrives. Once per process.
void dump_on_signals(std::function<void(const std::string& reason)> dump);

}  // namespace ddp::detail
