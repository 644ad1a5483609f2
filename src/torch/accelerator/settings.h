// The Accelerator's settings as the code and the launch give them (pure: the environment comes
// in as a lookup), and which gathered rows are real samples.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "ddp/torch/accelerator.h"

namespace ddp::detail {

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

struct AcceleratorSettings {
  MixedPrecision mixed_precision = MixedPrecision::kNo;
  int gradient_accumulation_steps = 1;
  bool cpu = false;
};

// The code's settings win; then the launch's variables (ACCELERATE_MIXED_PRECISION,
// ACCELERATE_GRADIENT_ACCUMULATION_STEPS, ACCELERATE_USE_CPU); then the defaults. Throws
// InvalidArgument naming the setting or variable with a bad value.
AcceleratorSettings resolve_settings(const AcceleratorOptions& options, const EnvLookup& env);

}  // namespace ddp::detail
