// Copies for a group of one, in the CUDA build (the stub's are in no_nccl.cpp).
#include "nccl/device_copy.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "nccl/cuda_api.h"

namespace ddp::detail {
namespace {

// One copy stream per device, for the life of the process.
cudaStream_t copy_stream(int device) {
  static std::mutex mutex;
  static auto* streams = new std::map<int, std::unique_ptr<cuda::Stream>>();  // never destroyed: used at exit
  std::lock_guard lock(mutex);
  auto& stream = (*streams)[device];
  if (!stream) stream = std::make_unique<cuda::Stream>();
  return stream->get();
}

}  // namespace

void copy_buffer(const Buffer& from, const Buffer& to) {
  if (from.data == to.data || to.bytes() == 0) return;
  if (from.device.is_cpu() && to.device.is_cpu()) {
    std::memmove(to.data, from.data, to.bytes());
    return;
  }
  const int device = to.device.is_cuda() ? to.device.index : from.device.index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = copy_stream(device);
  cuda::Event mark;
  cuda::wait_until_ready(stream, {&from, &to}, mark, "copy");
  cuda::check(cudaMemcpyAsync(to.data, from.data, to.bytes(), cudaMemcpyDefault, stream), "cudaMemcpyAsync (copy)");
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (copy)");
}

}  // namespace ddp::detail
