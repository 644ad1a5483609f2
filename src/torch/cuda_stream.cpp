// The only CUDA-specific code of the LibTorch front (built with CUDA when LibTorch has it).
#include "cuda_stream.h"

#ifdef DDP_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

namespace ddp::detail {

#ifdef DDP_TORCH_CUDA

struct StreamContext::State {
  explicit State(c10::cuda::CUDAStream s) : stream(s), event(cudaEventDisableTiming) {}
  c10::cuda::CUDAStream stream;
  at::cuda::CUDAEvent event;  // created on its first record
  bool recorded = false;
};

StreamContext::StreamContext(const c10::Device& device) {
  if (device.is_cuda()) state_ = std::make_shared<State>(c10::cuda::getCurrentCUDAStream(device.index()));
}

void* StreamContext::ready() {
  if (!state_) return nullptr;
  if (!state_->recorded) {
    state_->event.record(state_->stream);
    state_->recorded = true;
  }
  return static_cast<void*>(state_->event.event());
}

void StreamContext::run(const std::function<void()>& fn) const {
  if (!state_) return fn();
  c10::cuda::CUDAStreamGuard guard(state_->stream);  // also makes its device current
  fn();
}

bool torch_has_cuda() { return true; }

#else  // a CPU-only LibTorch

struct StreamContext::State {};

StreamContext::StreamContext(const c10::Device&) {}
void* StreamContext::ready() { return nullptr; }
void StreamContext::run(const std::function<void()>& fn) const { fn(); }
bool torch_has_cuda() { return false; }

#endif

}  // namespace ddp::detail
