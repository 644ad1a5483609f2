// Where LibTorch 1.13 (Debian 12's) and 2.x differ, in one place: the rest of the front calls
// these and never asks which LibTorch it is built against (docs/LIBTORCH.md).
#pragma once

#include <ATen/Functions.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

// LibTorch 2.4 made autocast's state keyed by device type and deprecated the CUDA- and CPU-named
// calls (each prints a warning at every use).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DDP_TORCH_AUTOCAST_BY_DEVICE 1
#else
#define DDP_TORCH_AUTOCAST_BY_DEVICE 0
#endif

namespace ddp::compat {

// Autocast's per-thread state for the CPU or CUDA.
inline bool autocast_enabled(c10::DeviceType device) {
#if DDP_TORCH_AUTOCAST_BY_DEVICE
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
#if DDP_TORCH_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(device, enabled);
#else
  device == c10::DeviceType::CPU ? at::autocast::set_cpu_enabled(enabled) : at::autocast::set_enabled(enabled);
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if DDP_TORCH_AUTOCAST_BY_DEVICE
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device, at::ScalarType dtype) {
#if DDP_TORCH_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_dtype(device, dtype);
#else
  device == c10::DeviceType::CPU ? at::autocast::set_autocast_cpu_dtype(dtype)
                                 : at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

// The dtypes CPU autocast runs in: bfloat16 only in 1.13, float16 too in 2.x.
inline bool cpu_autocast_supports(at::ScalarType dtype) {
  return dtype == at::kBFloat16 || (TORCH_VERSION_MAJOR >= 2 && dtype == at::kHalf);
}
inline constexpr const char* kCpuAutocastDtypes = TORCH_VERSION_MAJOR >= 2 ? "bfloat16 and float16" : "bfloat16";

// The key of a parameter in Optimizer::state(): a string of its TensorImpl's address in 1.13
// (c10::guts::to_string, gone in 2.x), the address itself in 2.x.
using OptimizerStateKey = typename std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

template <typename Key = OptimizerStateKey>  // a template, so that only the branch of this LibTorch compiles
Key optimizer_state_key(const at::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what c10::guts::to_string wrote
    text << parameter.unsafeGetTensorImpl();
    return text.str();
  } else {
    return parameter.unsafeGetTensorImpl();
  }
}

// A parameter's gradient accumulator, the autograd node DDP hooks: a std::shared_ptr in 1.13 and
// most of 2.x, a c10::intrusive_ptr in newer ones.
using GradAccumulator = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// dst[i].copy_(src[i]) for every i: one multi-tensor kernel per batch of tensors where LibTorch
// has _foreach_copy_ (2.1 on; on the CPU it copies them one by one), else one copy each.
inline void copy_all(at::TensorList dst, at::TensorList src) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::_foreach_copy_(dst, src);
#else
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
#endif
}

}  // namespace ddp::compat
