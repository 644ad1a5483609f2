// What the group builds from a backend's own methods when the backend lacks it, in one place:
// AVG through SUM and a division, and 16-bit float reductions through float32. (The optional
// Backend methods' defaults, reduce_scatter from all_reduce and the like, are in emulation.cpp too.)
#pragma once

#include "ddp/backend.h"
#include "op/op.h"

namespace ddp::detail {

// Runs a reducing op (all_reduce, reduce, reduce_scatter) whose result lands in op.output,
// emulating the dtype or operator the backend does not support. Throws InvalidArgument when
// neither the backend nor an emulation can do it.
void run_reduction(Backend& backend, const Op& op, Backend::Deadline deadline);

}  // namespace ddp::detail
