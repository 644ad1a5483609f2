// Per-iteration bookkeeping of the reducer: which gradients are ready, which buckets are
// complete, and which buckets may launch now. Buckets launch strictly in bucket order, so that
// every rank issues its all-reduces in the same order whatever order its gradients arrive in.
// Pure: no tensors, no threads (the reducer calls it from the autograd thread).
#pragma once

#include <cstddef>
#include <vector>

#include "reducer/bucket_plan.h"

namespace ddp::detail {

class Readiness {
 public:
  Readiness(const BucketPlan& plan, std::size_t num_params);

  // Starts a new iteration: nothing ready, nothing launched.
  void reset();

  // Marks `param` ready and returns the buckets that may launch now, in order (possibly none).
  // A parameter already ready in this iteration changes nothing.
  std::vector<std::size_t> mark_ready(std::size_t param);

  bool is_ready(std::size_t param) const { return ready_[param]; }
  // Parameters of some bucket that are not ready yet.
  std::vector<std::size_t> unready() const;
  // The order in which parameters became ready in this iteration.
  const std::vector<std::size_t>& ready_order() const { return order_; }

 private:
  BucketPlan plan_;
  std::vector<std::size_t> bucket_of_;  // per parameter; SIZE_MAX when not in any bucket
  std::vector<std::size_t> pending_;    // per bucket: gradients still missing
  std::vector<bool> ready_;             // per parameter
  std::vector<std::size_t> order_;
  std::size_t next_launch_ = 0;
};

}  // namespace ddp::detail
