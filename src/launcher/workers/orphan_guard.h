// A tiny helper process that outlives ddprun by a moment: when ddprun ends in any way (even
// SIGKILL, which it cannot catch), the guard sees its pipe close and SIGKILLs every worker
// process group still on its list, so that a worker's own children do not outlive the job.
// (The workers themselves also have PR_SET_PDEATHSIG; the guard covers their children.)
#pragma once

#include <sys/types.h>

#include <memory>

#include "net/socket.h"

namespace ddp::launcher {

class OrphanGuard {
 public:
  // Forks the guard. Call before starting any thread (the child runs plain code after fork).
  // Returns null when it cannot be started (then only PR_SET_PDEATHSIG protects).
  static std::unique_ptr<OrphanGuard> start();
  ~OrphanGuard();

  // Adds or removes a process group on the guard's list.
  void watch(pid_t group);
  void forget(pid_t group);

 private:
  OrphanGuard(pid_t pid, detail::Fd pipe) : pid_(pid), pipe_(std::move(pipe)) {}
  void send(char op, pid_t group);

  pid_t pid_;
  detail::Fd pipe_;
};

}  // namespace ddp::launcher
