// DDP communication hooks (PyTorch's register_comm_hook): how a bucket of gradients is reduced.
//
//   ddp_model->register_comm_hook(ddp::comm_hooks::fp16_compress());
//
// Your own hook receives the bucket (its gradients flattened in one tensor, not yet averaged) and
// returns a Future whose value is the bucket's gradients averaged over the group (same size and
// dtype as buffer()). Give the Future the tensor the communication writes into: it holds it until
// the end of backward waits for it.
//
//   ddp_model->register_comm_hook([](ddp::GradBucket& bucket) {
//     at::Tensor buffer = bucket.buffer();
//     auto work = ddp::all_reduce_async(buffer, ddp::ReduceOp::AVG, bucket.process_group());
//     return std::make_shared<ddp::Future>(work, buffer);
//   });
//
// A value computed once the communication is done comes from a continuation, which receives the
// tensor the Future holds; capture anything else by value:
//
//   ddp_model->register_comm_hook([](ddp::GradBucket& bucket) {
//     at::Tensor wire = bucket.buffer().to(at::kBFloat16);
//     auto work = ddp::all_reduce_async(wire, ddp::ReduceOp::AVG, bucket.process_group());
//     return std::make_shared<ddp::Future>(
//         work, wire, [buffer = bucket.buffer()](at::Tensor wire) mutable { return buffer.copy_(wire); });
//   });
//
// (tests/torch/ddp/asan/comm_hook_asan_test.cpp runs these two under AddressSanitizer.) Hooks run
// on the autograd thread while backward continues, one bucket at a time in bucket order; the
// Future is waited for at the end of backward, on the thread that runs backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "ddp/process_group.h"
#include "ddp/torch/future.h"

namespace ddp {

// One bucket as a hook sees it. DDP keeps it alive until the hook's Future has been waited for.
class GradBucket {
 public:
  GradBucket(std::size_t index, bool is_last, at::Tensor buffer, std::vector<at::Tensor> parameters,
             std::shared_ptr<ProcessGroup> group)
      : index_(index),
        is_last_(is_last),
        buffer_(std::move(buffer)),
        parameters_(std::move(parameters)),
        group_(std::move(group)) {}

  // Position in the launch order (0 is the first bucket to become ready).
  std::size_t index() const { return index_; }
  bool is_last() const { return is_last_; }
  // The bucket's gradients, flattened (one dtype, one device): a handle to the bucket's memory,
  // returned by value so that a Future holds the tensor itself, never a reference to it.
  at::Tensor buffer() const { return buffer_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  // The group this bucket's communication runs on: DDP's group, or for every odd bucket its twin
  // (ProcessGroup::twin) where no two ranks share a host, so that two buckets are in flight.
  // Issue a bucket's collectives here, on the thread the hook or the end of backward runs on.
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

// PyTorch's allreduce_hook: divide the bucket by the group size, all-reduce (SUM) in place. (DDP
// without a hook averages to the same value, with PyTorch's reducer's arithmetic: see docs/DDP.md.)
CommHook allreduce();
// Cast to float16, divide, all-reduce, cast back: half the bytes on the wire, lower precision.
CommHook fp16_compress();
// As fp16_compress with bfloat16 (float32's range, fewer mantissa bits).
CommHook bf16_compress();

}  // namespace comm_hooks
}  // namespace ddp
