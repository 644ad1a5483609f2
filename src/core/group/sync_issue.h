// What ddp::issue_and_wait tells the process group: the next host collective this thread issues
// is one it will wait for at once, so the group posts it without waking its worker and this
// thread runs it (two thread hand-offs less).
#pragma once

#include <cstdint>
#include <memory>

#include "group/worker.h"

namespace ddp::detail {

class SyncIssue {
 public:
  // Arms this thread (scopes nest).
  SyncIssue();
  // A posted op that run() did not see (the issuing code threw) is handed to the worker.
  ~SyncIssue();
  SyncIssue(const SyncIssue&) = delete;
  SyncIssue& operator=(const SyncIssue&) = delete;

  // For the group, at issue: this thread's armed scope, disarmed (one op per scope); or null.
  static SyncIssue* claim();
  // For the group: the claimed op was posted to `worker` without waking it.
  void posted(std::shared_ptr<Worker> worker, std::uint64_t ticket);

  // Runs the posted op on this thread if it is next and nothing runs; otherwise wakes the worker,
  // which then runs it in its turn.
  void run();

 private:
  SyncIssue* previous_;
  bool armed_ = true;
  std::shared_ptr<Worker> worker_;  // set once an op was posted, until run()
  std::uint64_t ticket_ = 0;
};

}  // namespace ddp::detail
