#include "ddp/torch/future.h"

#include "ddp/error.h"

namespace ddp {

Future::Future(std::shared_ptr<Work> work, at::Tensor tensor) : work_(std::move(work)), tensor_(std::move(tensor)) {
  if (!work_)
    throw InvalidArgument("Future: the work is null; pass the Work of the communication that fills the tensor");
}

Future::Future(std::shared_ptr<Work> work, at::Tensor tensor, std::function<at::Tensor(at::Tensor)> then)
    : Future(std::move(work), std::move(tensor)) {
  if (!then) {
    throw InvalidArgument(
        "Future: the continuation is empty; use Future(work, tensor) when the value is the tensor itself");
  }
  then_ = std::move(then);
}

std::shared_ptr<Future> Future::completed(at::Tensor value) {
  return std::make_shared<Future>(Work::completed("a completed future"), std::move(value));
}

at::Tensor Future::wait() {
  work_->wait();
  std::call_once(once_, [&] {
    value_ = then_ ? then_(tensor_) : tensor_;
    then_ = nullptr;  // what it captured is not needed any more
    tensor_ = at::Tensor();
  });
  return value_;
}

bool Future::is_completed() const { return work_->is_completed(); }

}  // namespace ddp
