// ddp::Future: the result of an asynchronous communication that yields a tensor (what a DDP
// comm hook returns, as torch.futures.Future does in PyTorch).
//
//   at::Tensor buffer = bucket.buffer();
//   auto work = ddp::all_reduce_async(buffer, ddp::ReduceOp::AVG, group);
//   auto done = std::make_shared<ddp::Future>(work, buffer);                 // yields buffer
//   auto cast = std::make_shared<ddp::Future>(work, wire, [buffer](at::Tensor wire) mutable {
//     return buffer.copy_(wire);                                             // yields then(wire)
//   });
//
// A Future holds the tensor its work writes into until it is no longer needed, and hands it to
// the continuation: nothing a hook returns needs a reference to the hook's locals or its bucket.
// Capture anything else the continuation needs by value.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <mutex>

#include "ddp/work.h"

namespace ddp {

class Future {
 public:
  // Completes when `work` does; its value is `tensor` (what the work writes into), held until then.
  // Throws InvalidArgument when `work` is null.
  Future(std::shared_ptr<Work> work, at::Tensor tensor);
  // Completes when `work` does; its value is `then(tensor)`, computed once, on the first thread that
  // waits (so a conversion after the all-reduce runs off the communication thread). `tensor` is
  // held until then. Throws InvalidArgument when `work` or `then` is null.
  Future(std::shared_ptr<Work> work, at::Tensor tensor, std::function<at::Tensor(at::Tensor)> then);
  // An already completed future.
  static std::shared_ptr<Future> completed(at::Tensor value);

  // Blocks until done and returns the value; rethrows the communication's error (the continuation
  // does not run then) or the continuation's. Thread-safe.
  at::Tensor wait();
  bool is_completed() const;
  const std::shared_ptr<Work>& work() const { return work_; }

 private:
  std::shared_ptr<Work> work_;
  at::Tensor tensor_;
  std::function<at::Tensor(at::Tensor)> then_;
  std::once_flag once_;
  at::Tensor value_;
};

}  // namespace ddp
