// What one node's ddprun writes about an attempt that takes more than a sentence: a worker
// stopped alone (the notice at once, then the record that ends the attempt) and the root cause of
// a failure from the evidence (blame.h) placed on its node.
#pragma once

#include "reports/blame.h"

#include <chrono>
#include <optional>
#include <string>

#include "rendezvous/attempt_end.h"
#include "rendezvous/rendezvous.h"
#include "workers/worker_group.h"

namespace ddp::launcher {

// "rank 1 (pid 42) is suspended (...), and every other worker of the job has exited: ... Continue
// it ... (kill -CONT 42); otherwise ddprun ends it as a failure in 60.0 s (--stopped_timeout)."
// For the workers group.stopped_alone() names.
std::string stopped_alone_notice(const WorkerGroup& group, std::chrono::milliseconds bound);

// The WorkerStopped record for the first of them, from `reporter` (this node).
AttemptEnd stopped_too_long_end(const WorkerGroup& group, AttemptEnd reporter, std::chrono::milliseconds bound);

// The root cause when the failed worker (group index `index`) was a victim: the rank its failure
// record (`records`, the job's store) says it waited for, checked against this node's stopped
// workers, on this node or another of `membership` (ranks are numbered node by node). nullopt:
// the failed worker is the root cause.
std::optional<Blame> blame_for(WorkerGroup& group, std::size_t index, const Membership& membership,
                               const FailureLookup& records);

// The WorkerFailed record for the group's first failed worker, from `reporter` (this node), with
// its root cause (blame_for) when it was a victim.
AttemptEnd worker_failed_end(WorkerGroup& group, AttemptEnd reporter, const Membership& membership,
                             const FailureLookup& records);

}  // namespace ddp::launcher
