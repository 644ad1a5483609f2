#include "gpu_support.h"

#include <stdexcept>

namespace ddp::test {

int gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string gpu_status() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (error != cudaSuccess)
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  return std::to_string(count) + " CUDA device(s)";
}

void cuda_check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) +
                             ")");
  }
}

Buffer CudaMemory::allocate(std::size_t bytes, DataType dtype, std::size_t count) {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  void* data = nullptr;
  cuda_check(cudaMalloc(&data, bytes), "cudaMalloc");
  return Buffer{data, count, dtype, Device{Device::Type::CUDA, device_}};
}

void CudaMemory::release(const Buffer& buffer) { cudaFree(buffer.data); }

void CudaMemory::upload(const Buffer& device, const void* host) {
  cuda_check(cudaMemcpy(device.data, host, device.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

void CudaMemory::download(void* host, const Buffer& device) {
  cuda_check(cudaMemcpy(host, device.data, device.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
}

}  // namespace ddp::test
