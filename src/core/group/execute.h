// Running one validated operation on a backend (what it lacks emulated: group/emulation.h), and
// the debug-mode agreement check.
#pragma once

#include "ddp/backend.h"
#include "ddp/detail/op.h"

namespace ddp::detail {

// Runs a collective (not send/recv) on `backend`.
void execute(Backend& backend, const Op& op, Backend::Deadline deadline);

// Debug mode (the group's settings: DDP_DEBUG=1): exchanges every rank's fingerprint of `op` and throws MismatchError
// listing what each rank called when they differ.
void check_agreement(Backend& backend, const Op& op, Backend::Deadline deadline);

}  // namespace ddp::detail
