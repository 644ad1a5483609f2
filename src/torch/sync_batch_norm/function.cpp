#include "sync_batch_norm/function.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "ddp/error.h"
#include "shape_text.h"
#include "sync_batch_norm/exchange.h"
#include "sync_batch_norm/statistics.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides tensors: forward's participants (the same ones must answer).
struct ExchangeHolder : torch::CustomClassHolder {
  explicit ExchangeHolder(std::shared_ptr<StatsExchange> e) : exchange(std::move(e)) {}
  std::shared_ptr<StatsExchange> exchange;
};

struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  // The layer's optional tensors (no affine parameters, no running statistics) come as optionals:
  // LibTorch records every tensor argument's device for backward, which an undefined one lacks.
  static at::Tensor forward(AutogradContext* ctx, at::Tensor input, c10::optional<at::Tensor> weight_arg,
                            c10::optional<at::Tensor> bias_arg, c10::optional<at::Tensor> running_mean_arg,
                            c10::optional<at::Tensor> running_var_arg, double momentum, double eps,
                            std::shared_ptr<ProcessGroup> group) {
    const at::Tensor weight = weight_arg.value_or(at::Tensor()), bias = bias_arg.value_or(at::Tensor());
    at::Tensor running_mean = running_mean_arg.value_or(at::Tensor()),
               running_var = running_var_arg.value_or(at::Tensor());
    input = input.contiguous(input.suggest_memory_format());
    auto exchange = std::make_shared<StatsExchange>(group);
    const auto stats = combine_statistics(exchange->all_gather(local_statistics(input)), statistics_dtype(input));
    if (stats.count < 2) {
      throw InvalidArgument(cat("SyncBatchNorm: expected more than 1 value per channel when training, got ",
                                stats.count, " over the group of ", group->size(), " ranks (this rank's input is ",
                                shape_of(input), "); use larger batches, or call it in eval mode"));
    }
    update_running_statistics(running_mean, running_var, stats, momentum);
    const at::Tensor invstd = (stats.var + eps).rsqrt();
    ctx->save_for_backward({input, weight, stats.mean, invstd});
    ctx->saved_data["count"] = stats.count;
    ctx->saved_data["exchange"] = at::IValue::make_capsule(c10::make_intrusive<ExchangeHolder>(exchange));
    return normalize(input, stats, weight, bias, eps);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const std::int64_t channels = input.size(1);
    const at::Tensor grad_output = grads[0].contiguous(input.suggest_memory_format());
    const at::Tensor sums = local_gradient_sums(grad_output, input, mean);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (weight.defined() && ctx->needs_input_grad(1)) {
      grad_weight = (sums.narrow(0, channels, channels) * invstd.to(at::kDouble)).to(weight.scalar_type());
    }
    if (weight.defined() && ctx->needs_input_grad(2)) grad_bias = sums.narrow(0, 0, channels).to(weight.scalar_type());
    if (ctx->needs_input_grad(0)) {  // the same on every rank: the same graph
      auto holder = ctx->saved_data["exchange"].toCapsule();
      const auto& exchange = static_cast<ExchangeHolder*>(holder.get())->exchange;
      grad_input = input_gradient(grad_output, input, mean, invstd, weight, exchange->all_reduce(sums),
                                  ctx->saved_data["count"].toInt());
    }
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor sync_batch_norm(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                           at::Tensor running_mean, at::Tensor running_var, double momentum, double eps,
                           std::shared_ptr<ProcessGroup> group) {
  const auto given = [](const at::Tensor& t) { return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt; };
  return SyncBatchNormFunction::apply(input, given(weight), given(bias), given(running_mean), given(running_var),
                                      momentum, eps, std::move(group));
}

}  // namespace ddp::detail
