// The all-reduce behind DDP's default gradient averaging, shared by comm_hooks::allreduce() (which
// divides the bucket first) and the reducer's built-in path (which divides while filling it).
#pragma once

#include <memory>

#include "ddp/torch/comm_hooks.h"

namespace ddp::detail {

// Sums the bucket over its group in place; the returned Future's value is the bucket.
std::shared_ptr<Future> all_reduce_bucket(GradBucket& bucket);

}  // namespace ddp::detail
