// ddp::amp::Autocast: Python's torch.autocast __enter__ and __exit__ (torch/amp/autocast_mode.py).
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>

#include "compat/torch_compat.h"
#include "ddp/error.h"
#include "ddp/torch/amp.h"
#include "util/log.h"

namespace ddp::amp {

Autocast::Autocast(c10::DeviceType device_type, AutocastOptions options) : device_type_(device_type) {
  const bool cpu = device_type == c10::DeviceType::CPU;
  if (!cpu && device_type != c10::DeviceType::CUDA) {
    throw InvalidArgument(ddp::detail::cat("ddp::amp::Autocast: device type ", c10::DeviceTypeName(device_type),
                                           " is not supported; use torch::kCUDA or torch::kCPU"));
  }
  dtype_ = options.dtype.value_or(compat::autocast_dtype(device_type));
  // LibTorch warns that it disables autocast for a dtype the CPU cannot autocast to, and then
  // fails (1.13) or runs without it: refuse before any state changes instead.
  if (cpu && !compat::cpu_autocast_supports(dtype_)) {
    throw InvalidArgument(ddp::detail::cat("ddp::amp::Autocast: CPU autocast supports only ",
                                           compat::kCpuAutocastDtypes, " in this LibTorch, not ", dtype_,
                                           "; pass {.dtype = torch::kBFloat16}"));
  }
  const bool cache_enabled = options.cache_enabled.value_or(at::autocast::is_autocast_cache_enabled());
  enabled_ = options.enabled;
  if (enabled_ && !cpu && !at::hasCUDA()) {
    ddp::detail::log(ddp::detail::LogLevel::Warn,
                     "ddp::amp::Autocast: CUDA autocast was asked for, but CUDA is not available; "
                     "this region runs without autocast");
    enabled_ = false;
  }
  previous_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  previous_enabled_ = compat::autocast_enabled(device_type);
  previous_dtype_ = compat::autocast_dtype(device_type);
  compat::set_autocast_dtype(device_type, dtype_);
  compat::set_autocast_enabled(device_type, enabled_);
  at::autocast::increment_nesting();
  at::autocast::set_autocast_cache_enabled(cache_enabled);
}

Autocast::~Autocast() {
  // Leaving the outermost region drops the casted copies of the weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast_enabled(device_type_, previous_enabled_);
  compat::set_autocast_dtype(device_type_, previous_dtype_);
  at::autocast::set_autocast_cache_enabled(previous_cache_enabled_);
}

}  // namespace ddp::amp
