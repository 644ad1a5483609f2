// What the GPU tests share: skipping without a GPU, device memory for the collective suite,
// checked CUDA calls.
#pragma once

#include <cuda_runtime.h>  // with the C++ overloads (cudaMalloc(T**), ...)
#include <gtest/gtest.h>

#include <string>

#include "core/group/collective_suite.h"

namespace ddp::test {

// How many CUDA devices this process sees; 0 when there is no driver or no device.
int gpu_count();
// Why gpu_count() is what it is, for skip messages: "cudaGetDeviceCount: cudaErrorNoDevice ...".
std::string gpu_status();

// Throws std::runtime_error naming `what` when `error` is not cudaSuccess.
void cuda_check(cudaError_t error, const char* what);

// Device memory for run_collective_suite, on one GPU; uploads and downloads are synchronous.
class CudaMemory : public DeviceMemory {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  Buffer allocate(std::size_t bytes, DataType dtype, std::size_t count) override;
  void release(const Buffer& buffer) override;
  void upload(const Buffer& device, const void* host) override;
  void download(void* host, const Buffer& device) override;

 private:
  int device_;
};

}  // namespace ddp::test

// Skips the test (with the reason) unless this machine has at least `n` CUDA devices. Every GPU
// test starts with it, so the binary passes, skipping, on machines without a GPU.
#define DDP_REQUIRE_GPUS(n)                                                                    \
  do {                                                                                         \
    const int ddp_have_gpus_ = ::ddp::test::gpu_count();                                       \
    if (ddp_have_gpus_ == 0) GTEST_SKIP() << "no CUDA device: " << ::ddp::test::gpu_status();  \
    if (ddp_have_gpus_ < (n)) {                                                                \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, this machine has " << ddp_have_gpus_; \
    }                                                                                          \
  } while (0)
