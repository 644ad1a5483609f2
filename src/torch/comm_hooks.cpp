// The built-in DDP communication hooks.
#include "ddp/torch/comm_hooks.h"

#include <ATen/ATen.h>

#include "bucket_allreduce.h"
#include "ddp/torch/collectives.h"

namespace ddp {

std::shared_ptr<Future> detail::all_reduce_bucket(GradBucket& bucket) {
  at::Tensor buffer = bucket.buffer();
  auto work = all_reduce_async(buffer, ReduceOp::SUM, bucket.process_group());
  return std::make_shared<Future>(work, [buffer] { return buffer; });
}

namespace comm_hooks {
namespace {

// Divide first (as PyTorch's hooks do, so sums cannot overflow), then all-reduce a copy in
// `wire_type`, then cast back into the bucket.
CommHook compressing(at::ScalarType wire_type) {
  return [wire_type](GradBucket& bucket) {
    at::Tensor buffer = bucket.buffer();
    const auto size = bucket.process_group()->size();
    at::Tensor wire = buffer.to(wire_type).div_(size);
    auto work = all_reduce_async(wire, ReduceOp::SUM, bucket.process_group());
    return std::make_shared<Future>(work, [buffer, wire]() mutable { return buffer.copy_(wire); });
  };
}

}  // namespace

CommHook allreduce() {
  return [](GradBucket& bucket) {
    bucket.buffer().div_(bucket.process_group()->size());
    return detail::all_reduce_bucket(bucket);
  };
}

CommHook fp16_compress() { return compressing(at::kHalf); }
CommHook bf16_compress() { return compressing(at::kBFloat16); }

}  // namespace comm_hooks
}  // namespace ddp
