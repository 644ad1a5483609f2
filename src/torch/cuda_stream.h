// How tensor collectives meet CUDA streams (docs/NCCL.md). An op on CUDA tensors is ordered
// after the work its caller queued on the current stream before issuing it (an event recorded
// there becomes the `ready` of the op's device buffers), and what happens to the results after
// the op completed (copies out of flat or staged tensors) runs on that same stream. With a
// CPU-only LibTorch (no DDP_TORCH_CUDA) CUDA tensors cannot exist and this does nothing.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace ddp::detail {

class StreamContext {
 public:
  // Captures the current CUDA stream of `device`; a CPU device captures nothing.
  explicit StreamContext(const c10::Device& device);

  // An event (cudaEvent_t) recorded on the captured stream at the first call, so call it once the
  // op's inputs are prepared; null for the CPU. It lives as long as this context (and its copies).
  void* ready();

  // Runs `fn` with the captured stream current on this thread (on the CPU: just runs it).
  void run(const std::function<void()>& fn) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// True when this build of ddp's LibTorch front handles CUDA tensors (LibTorch with CUDA).
bool torch_has_cuda();

}  // namespace ddp::detail
