// The "nccl" backend (CUDA buffers). Built from nccl_backend.cpp when CUDA and NCCL are found,
// else from no_nccl.cpp, a stub whose errors say what to install.
#pragma once

#include <memory>

#include "ddp/backend.h"

namespace ddp::detail {

std::unique_ptr<Backend> make_nccl_backend(const BackendContext& context);

// True when this build has NCCL and the machine has at least one CUDA device.
bool cuda_available();

}  // namespace ddp::detail
