// GradScaler's unscale: every gradient of an optimizer divided by the scale, with a per-device
// check for inf and NaN (PyTorch's _unscale_grads_).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <unordered_map>
#include <vector>

namespace ddp::amp::detail {

// Multiplies every gradient of `groups` by `inv_scale` (float32 [1]) in place and returns, for
// each device that holds gradients, a float32 [1] tensor on it: 1 when some gradient there held
// inf or NaN before the multiplication, else 0. CUDA gradients go through LibTorch's fused
// kernel, one call per device and dtype; others through plain ATen ops with its arithmetic.
// Sparse gradients unscale their values (float16 ones are coalesced first). Throws Error for a
// float16 gradient unless `allow_fp16`.
std::unordered_map<c10::Device, at::Tensor> unscale_gradients(std::vector<torch::optim::OptimizerParamGroup>& groups,
                                                              const at::Tensor& inv_scale, bool allow_fp16);

}  // namespace ddp::amp::detail
