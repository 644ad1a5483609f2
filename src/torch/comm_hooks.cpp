// The built-in DDP communication hooks.
#include "ddp/torch/comm_hooks.h"

#include <ATen/ATen.h>

#include "ddp/torch/collectives.h"

namespace ddp::comm_hooks {
namespace {

// Divide first (as PyTorch's hooks do, so sums cannot overflow), then all-reduce a copy in
// `wire_type`, then cast back into the bucket.
CommHook compressing(at::ScalarType wire_type) {
  return [wire_type](GradBucket& bucket) {
    at::Tensor wire = bucket.buffer().to(wire_type).div_(bucket.process_group()->size());
    auto work = all_reduce_async(wire, ReduceOp::SUM, bucket.process_group());
    return std::make_shared<Future>(work, wire,
                                    [buffer = bucket.buffer()](at::Tensor wire) mutable { return buffer.copy_(wire); });
  };
}

}  // namespace

CommHook allreduce() {
  return [](GradBucket& bucket) {
    at::Tensor buffer = bucket.buffer();
    buffer.div_(bucket.process_group()->size());
    return std::make_shared<Future>(all_reduce_async(buffer, ReduceOp::SUM, bucket.process_group()), buffer);
  };
}

CommHook fp16_compress() { return compressing(at::kHalf); }
CommHook bf16_compress() { return compressing(at::kBFloat16); }

}  // namespace ddp::comm_hooks
