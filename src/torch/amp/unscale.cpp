#include "amp/unscale.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <map>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::amp::detail {
namespace {

// _amp_foreach_non_finite_check_and_unscale_ in plain ops: the check reads the scaled values,
// the product is computed in float32 (the kernels' opmath) and stored in the gradient's dtype.
void check_and_unscale(const std::vector<at::Tensor>& grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  for (const auto& g : grads) {
    found_inf.masked_fill_(at::logical_not(at::isfinite(g)).any(), 1.0);
    g.mul_(inv_scale);
  }
}

}  // namespace

std::unordered_map<c10::Device, at::Tensor> unscale_gradients(std::vector<torch::optim::OptimizerParamGroup>& groups,
                                                              const at::Tensor& inv_scale, bool allow_fp16) {
  torch::NoGradGuard no_grad;
  // Device, then dtype: one kernel call per list (std::map keeps the calls in a fixed order).
  std::unordered_map<c10::Device, std::map<at::ScalarType, std::vector<at::Tensor>>> lists;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].params().size(); ++i) {
      auto& param = groups[g].params()[i];
      if (!param.grad().defined()) continue;
      if (!allow_fp16 && param.grad().scalar_type() == at::kHalf) {
        throw Error(ddp::detail::cat("GradScaler::unscale_: attempting to unscale FP16 gradients (parameter ", i,
                                     " of group ", g,
                                     "); keep the parameters in float32 and let Autocast run the "
                                     "forward in float16"));
      }
      at::Tensor to_unscale = param.grad();
      if (to_unscale.is_sparse()) {
        // Duplicate indices of scaled fp16 values could overflow when added: check the coalesced sum.
        if (to_unscale.scalar_type() == at::kHalf) {
          param.mutable_grad() = to_unscale.coalesce();
          to_unscale = param.grad();
        }
        to_unscale = to_unscale._values();
      }
      lists[to_unscale.device()][to_unscale.scalar_type()].push_back(to_unscale);
    }
  }
  std::unordered_map<c10::Device, at::Tensor> found_inf;
  for (auto& [device, per_dtype] : lists) {
    auto found = torch::zeros({1}, torch::TensorOptions().dtype(at::kFloat).device(device));
    const auto inv = inv_scale.to(device, /*non_blocking=*/true, /*copy=*/true);
    for (auto& [dtype_of_list, grads] : per_dtype) {
      (void)dtype_of_list;
      if (device.is_cuda()) {
        at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv);
      } else {
        check_and_unscale(grads, found, inv);
      }
    }
    found_inf.emplace(device, found);
  }
  return found_inf;
}

}  // namespace ddp::amp::detail
