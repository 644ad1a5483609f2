// Running one validated operation on a backend (what it lacks emulated: group/emulation.h), and
// the debug-mode agreement check.
#pragma once

#include "ddp/backend.h"
#include "op/op.h"
#include "util/variables.h"

namespace ddp::detail {

// Runs a collective (not send/recv) on `backend`.
void execute(Backend& backend, const Op& op, Backend::Deadline deadline);

// Debug mode, a group's setting (DDP_DEBUG=1).
struct DebugSettings {
  bool check_agreement = false;
};
inline constexpr Variable<DebugSettings> kDebugVariables[] = {
    {"DDP_DEBUG", "1: check before every collective that all ranks call the same one",
     read_switch<DebugSettings, &DebugSettings::check_agreement>},
};

// Debug mode: exchanges every rank's fingerprint of `op` and throws MismatchError
// listing what each rank called when they differ.
void check_agreement(Backend& backend, const Op& op, Backend::Deadline deadline);

}  // namespace ddp::detail
