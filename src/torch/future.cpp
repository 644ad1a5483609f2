#include "ddp/torch/future.h"

namespace ddp {

Future::Future(std::shared_ptr<Work> work, std::function<at::Tensor()> value)
    : work_(std::move(work)), compute_(std::move(value)) {}

std::shared_ptr<Future> Future::completed(at::Tensor value) {
  return std::make_shared<Future>(Work::completed("a completed future"), [value] { return value; });
}

at::Tensor Future::wait() {
  work_->wait();
  std::call_once(once_, [&] { value_ = compute_(); });
  return value_;
}

bool Future::is_completed() const { return work_->is_completed(); }

}  // namespace ddp
