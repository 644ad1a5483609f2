// The "nccl" backend (CUDA buffers). Built from nccl_backend.cpp (with cuda_api, communicator,
// p2p_channel, device_copy) when CUDA and NCCL are found, else from no_nccl.cpp, a stub whose
// errors say what to install. capabilities.cpp is in every build. Design: docs/NCCL.md.
#pragma once

#include <memory>
#include <string>

#include "ddp/backend.h"

namespace ddp::detail {

// The backend of one group: a non-blocking NCCL communicator on this rank's GPU (LOCAL_RANK's,
// else the current device), set up through ctx.store. Throws Error when no CUDA device can be
// used, InvalidArgument when LOCAL_RANK names a GPU this process cannot see, TimeoutError when
// the communicator is not set up within ctx.timeout.
std::unique_ptr<Backend> make_nccl_backend(const BackendContext& context);

// Throws what make_nccl_backend would for this process alone (no CUDA device, a LOCAL_RANK beyond
// the visible GPUs, no NCCL in this build), so that init_process_group says so at once on every
// rank instead of after a rendezvous that a failing rank 0 never hosts.
void check_nccl_usable();

// True when this build has NCCL and the machine has at least one CUDA device. Never throws
// (a missing driver counts as no device).
bool cuda_available();

// Whether NCCL reduces `dtype` with `op`: SUM, AVG, PRODUCT, MIN and MAX for every ddp dtype
// (float16 and bfloat16 included); the bitwise operators not at all.
bool nccl_supports(DataType dtype, ReduceOp op);

// What the stub says when the nccl backend is asked for: not in this build, and what to install.
std::string nccl_missing_message();

}  // namespace ddp::detail
