// ddp::Future: the result of an asynchronous communication that yields a tensor (what a DDP
// comm hook returns, as torch.futures.Future does in PyTorch).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

#include "ddp/work.h"

namespace ddp {

class Future {
 public:
  // Completes when `work` does; its value is `value()`, computed once, on the first thread that
  // waits (so a conversion after the all-reduce runs off the communication thread).
  Future(std::shared_ptr<Work> work, std::function<at::Tensor()> value);
  // An already completed future.
  static std::shared_ptr<Future> completed(at::Tensor value);

  // Blocks until done and returns the value; rethrows the communication's error.
  at::Tensor wait();
  bool is_completed() const;
  const std::shared_ptr<Work>& work() const { return work_; }

 private:
  std::shared_ptr<Work> work_;
  std::function<at::Tensor()> compute_;
  std::once_flag once_;
  at::Tensor value_;
};

}  // namespace ddp
