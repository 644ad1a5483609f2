// The knobs of the CPU backend (the shared-memory path, and its small all_reduce over TCP): the
// group's settings (ddp/detail/settings.h, where each is explained), as the shm code names them.
#pragma once

#include "ddp/detail/settings.h"

namespace ddp::detail::shm {

using Tuning = ShmSettings;

}  // namespace ddp::detail::shm
