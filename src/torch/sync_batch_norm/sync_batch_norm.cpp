#include "ddp/torch/sync_batch_norm.h"

#include <torch/nn/functional/batchnorm.h>
#include <torch/nn/init.h>
#include <torch/types.h>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "shape_text.h"
#include "sync_batch_norm/function.h"
#include "util/strings.h"

namespace ddp {
namespace {

using detail::cat;
using detail::shape_of;

void check_input(const at::Tensor& input, std::int64_t features) {
  if (input.dim() < 2 || input.dim() > 5) {
    throw InvalidArgument(
        cat("SyncBatchNorm: expected an input of 2 to 5 dimensions ([N, C], [N, C, L], "
            "[N, C, H, W] or [N, C, D, H, W]), got ",
            input.dim(), " (", shape_of(input), ")"));
  }
  if (input.size(1) != features) {
    throw InvalidArgument(cat("SyncBatchNorm: expected ", features, " channels in dimension 1 (num_features), got ",
                              input.size(1), " (input ", shape_of(input), ")"));
  }
}

// Batch norm's own check, when the statistics are this rank's alone.
void check_values_per_channel(const at::Tensor& input) {
  if (input.numel() / input.size(1) == 1) {
    throw InvalidArgument(cat("SyncBatchNorm: expected more than 1 value per channel when training, got input ",
                              shape_of(input), " (alone: a group of one); use larger batches, or eval mode"));
  }
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(torch::nn::BatchNormOptions options_, std::shared_ptr<ProcessGroup> process_group)
    : options(std::move(options_)), process_group_(std::move(process_group)) {
  reset();
}

SyncBatchNormImpl::SyncBatchNormImpl(torch::nn::BatchNormOptions options_, std::shared_ptr<ProcessGroup> process_group,
                                     const std::array<at::Tensor, 5>& adopted)
    : options(std::move(options_)), process_group_(std::move(process_group)), adopted_(adopted) {
  reset();
}

void SyncBatchNormImpl::reset() {
  const auto n = options.num_features();
  auto [w, b, mean, var, tracked] = std::exchange(adopted_, {});
  const bool adopting = w.defined() || mean.defined();
  if (options.affine()) {
    weight = register_parameter("weight", adopting ? w : torch::ones({n}), adopting ? w.requires_grad() : true);
    bias = register_parameter("bias", adopting ? b : torch::zeros({n}), adopting ? b.requires_grad() : true);
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", adopting ? mean : torch::zeros({n}));
    running_var = register_buffer("running_var", adopting ? var : torch::ones({n}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", adopting ? tracked : torch::tensor(0, torch::dtype(torch::kLong)));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  torch::nn::init::ones_(weight);
  torch::nn::init::zeros_(bias);
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  check_input(input, options.num_features());
  // The momentum, and the running statistics used, exactly as BatchNorm's forward has them.
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();  // cumulative moving average
  }
  const bool use_batch_statistics = is_training() || !options.track_running_stats();
  std::shared_ptr<ProcessGroup> group;
  if (is_training()) group = process_group_ ? process_group_ : (is_initialized() ? get_default_group() : nullptr);
  if (!group || group->size() == 1) {
    if (is_training()) check_values_per_channel(input);
    return torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight, bias,
                                                     use_batch_statistics, factor, options.eps());
  }
  return detail::sync_batch_norm(input, weight, bias, running_mean, running_var, factor, options.eps(),
                                 std::move(group));
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "ddp::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats() << ")";
}

}  // namespace ddp
