// Copies between buffers wherever they live: what a group of one does for all_gather, gather,
// scatter, reduce_scatter and all_to_all (it has no peer, only a copy to make).
#pragma once

#include "ddp/types.h"

namespace ddp::detail {

// Copies to.bytes() bytes from `from` to `to` (equal sizes; overlap allowed when both are on the
// CPU). CPU to CPU is a memmove. When either is on a CUDA device the copy waits for the buffers'
// `ready` events (or, without them, for the device's legacy default stream) and has completed
// when this returns. Throws Error for CUDA buffers in a build without CUDA.
void copy_buffer(const Buffer& from, const Buffer& to);

}  // namespace ddp::detail
