// DDP communication hooks (PyTorch's register_comm_hook): how a bucket of gradients is reduced.
//
//   ddp_model->register_comm_hook(ddp::comm_hooks::fp16_compress());
//   ddp_model->register_comm_hook([](ddp::GradBucket& bucket) {       // your own
//     auto work = ddp::all_reduce_async(bucket.buffer(), ddp::ReduceOp::AVG, bucket.process_group());
//     return std::make_shared<ddp::Future>(work, [&buf = bucket.buffer()] { return buf; });
//   });
//
// A hook receives the bucket (its gradients flattened in one tensor) and returns a Future whose
// value is the bucket's gradients averaged over the group (same size and dtype as buffer()).
// Hooks run on the autograd thread while backward continues; the Future is waited for at the end
// of backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "ddp/process_group.h"
#include "ddp/torch/future.h"

namespace ddp {

class GradBucket {
 public:
  GradBucket(std::size_t index, bool is_last, at::Tensor buffer, std::vector<at::Tensor> parameters,
             std::shared_ptr<ProcessGroup> group)
      : index_(index), is_last_(is_last), buffer_(std::move(buffer)), parameters_(std::move(parameters)),
        group_(std::move(group)) {}

  // Position in the launch order (0 is the first bucket to become ready).
  std::size_t index() const { return index_; }
  bool is_last() const { return is_last_; }
  // The bucket's gradients, flattened: one dtype, one device.
  at::Tensor& buffer() { return buffer_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }

 private:
  std::size_t index_;
  bool is_last_;
  at::Tensor buffer_;
  std::vector<at::Tensor> parameters_;
  std::shared_ptr<ProcessGroup> group_;
};

using CommHook = std::function<std::shared_ptr<Future>(GradBucket&)>;

namespace comm_hooks {

// The default: divide by the group size, all-reduce (SUM) in place.
CommHook allreduce();
// Cast to float16, divide, all-reduce, cast back: half the bytes on the wire, lower precision.
CommHook fp16_compress();
// As fp16_compress with bfloat16 (float32's range, fewer mantissa bits).
CommHook bf16_compress();

}  // namespace comm_hooks
}  // namespace ddp
