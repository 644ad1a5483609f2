// What the nccl backend can do, and what to install when it is missing. In every build, so that
// the stub's advice and the backend's capabilities are testable without CUDA.
#include "nccl/nccl_backend.h"

namespace ddp::detail {

bool nccl_supports(DataType, ReduceOp op) {
  // ncclSum, ncclProd, ncclMin, ncclMax and ncclAvg exist for every NCCL type ddp maps to; NCCL
  // has no bitwise reductions.
  return op != ReduceOp::BAND && op != ReduceOp::BOR && op != ReduceOp::BXOR;
}

std::string nccl_missing_message() {
  return "the nccl backend is not in this build of ddp: it was built without the CUDA toolkit and NCCL (CMake "
         "found no nccl.h and libnccl under /usr/local/cuda or CUDAToolkit_ROOT, or DDP_WITH_NCCL was OFF). Install "
         "the CUDA toolkit with NCCL (NVIDIA's cuda-toolkit and libnccl-dev packages, or NCCL's tarball in "
         "/usr/local/cuda), reconfigure with cmake -DDDP_WITH_NCCL=ON (it then fails if NCCL is still not found) "
         "and rebuild ddp; or use the gloo backend for CPU tensors.";
}

}  // namespace ddp::detail
