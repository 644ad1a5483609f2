#include "nccl/stream_wakeup.h"

namespace ddp::detail {
namespace {

// Runs on CUDA's host-function thread, which must make no CUDA call.
void CUDART_CB notify_reached(void* data) {
  const std::unique_ptr<std::shared_ptr<Wakeup>> wakeup(static_cast<std::shared_ptr<Wakeup>*>(data));
  (*wakeup)->notify();
}

}  // namespace

std::shared_ptr<Wakeup> wakeup_when_reached(cudaStream_t stream) {
  auto wakeup = std::make_shared<Wakeup>();
  auto held = std::make_unique<std::shared_ptr<Wakeup>>(wakeup);  // the host function's reference
  if (cudaLaunchHostFunc(stream, notify_reached, held.get()) != cudaSuccess) {
    cudaGetLastError();  // not a sticky error: the stream is fine, and the wait polls instead
    return nullptr;
  }
  held.release();  // notify_reached deletes it
  return wakeup;
}

}  // namespace ddp::detail
