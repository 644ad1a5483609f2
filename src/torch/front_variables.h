// The front's variables, each declared beside the code that reads it (reducer/ddp_variables.h,
// checkpoint_variables.h); the Accelerator's ACCELERATE_* variables are its own
// (accelerator/settings.h).
#pragma once

#include <vector>

#include "util/variables.h"

namespace ddp::detail {

// Every DDP_* variable the front declares, in their order.
std::vector<VariableInfo> front_variables();

}  // namespace ddp::detail
