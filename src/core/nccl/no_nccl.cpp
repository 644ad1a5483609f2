// Stands in for the nccl backend in builds without CUDA and NCCL.
#include "ddp/error.h"
#include "nccl/nccl_backend.h"

namespace ddp::detail {

std::unique_ptr<Backend> make_nccl_backend(const BackendContext&) {
  throw InvalidArgument(
      "the nccl backend is not in this build of ddp: it was built without the CUDA toolkit and NCCL. Install them "
      "(CUDA at /usr/local/cuda, with NCCL), reconfigure and rebuild ddp; or use the gloo backend for CPU tensors.");
}

bool cuda_available() { return false; }

}  // namespace ddp::detail
