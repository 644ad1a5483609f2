// Stands in for the nccl backend in builds without CUDA and NCCL.
#include <cstring>

#include "ddp/error.h"
#include "nccl/device_copy.h"
#include "nccl/nccl_backend.h"

namespace ddp::detail {

std::unique_ptr<Backend> make_nccl_backend(const BackendContext&) { throw InvalidArgument(nccl_missing_message()); }

void check_nccl_usable() { throw InvalidArgument(nccl_missing_message()); }

bool cuda_available() { return false; }

void copy_buffer(const Buffer& from, const Buffer& to) {
  if (from.device.is_cuda() || to.device.is_cuda()) {
    throw Error("a copy between CUDA buffers needs CUDA, and " + nccl_missing_message());
  }
  if (from.data != to.data && to.bytes() > 0) std::memmove(to.data, from.data, to.bytes());
}

}  // namespace ddp::detail
