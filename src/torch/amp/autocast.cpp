// ddp::amp::Autocast: Python's torch.autocast __enter__ and __exit__ (torch/amp/autocast_mode.py).
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>

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
  dtype_ = options.dtype.value_or(cpu ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype());
  // PyTorch 1.13 warns that it disables autocast here, then fails in set_autocast_cpu_dtype;
  // refuse before any state changes instead.
  if (cpu && dtype_ != at::kBFloat16) {
    throw InvalidArgument(ddp::detail::cat("ddp::amp::Autocast: CPU autocast supports only bfloat16 in LibTorch 1.13, not ",
                                           dtype_, "; pass {.dtype = torch::kBFloat16}"));
  }
  const bool cache_enabled = options.cache_enabled.value_or(at::autocast::is_autocast_cache_enabled());
  enabled_ = options.enabled;
  if (enabled_ && !cpu && !at::hasCUDA()) {
    ddp::detail::log(ddp::detail::LogLevel::Warn, "ddp::amp::Autocast: CUDA autocast was asked for, but CUDA is not available; "
                                                  "this region runs without autocast");
    enabled_ = false;
  }
  previous_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  if (cpu) {
    previous_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(enabled_);
    at::autocast::set_autocast_cpu_dtype(dtype_);
  } else {
    previous_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(dtype_);
    at::autocast::set_enabled(enabled_);
  }
  at::autocast::increment_nesting();
  at::autocast::set_autocast_cache_enabled(cache_enabled);
}

Autocast::~Autocast() {
  // Leaving the outermost region drops the casted copies of the weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (device_type_ == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(previous_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_enabled(previous_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  }
  at::autocast::set_autocast_cache_enabled(previous_cache_enabled_);
}

}  // namespace ddp::amp
