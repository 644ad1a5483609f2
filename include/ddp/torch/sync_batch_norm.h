// ddp::SyncBatchNorm: batch normalization over the whole group's batch (PyTorch's
// nn.SyncBatchNorm), on the CPU and on CUDA, for 1d, 2d and 3d inputs. When each rank's batch is
// small, per-rank statistics are noisy; with SyncBatchNorm every rank normalizes with the mean
// and variance of all ranks' samples together, as one process would on the concatenated batch.
//
//   struct Net : torch::nn::Module {
//     Net() { bn = register_module("bn", ddp::SyncBatchNorm(64)); }  // where torch::nn::BatchNorm2d(64) was
//     at::Tensor forward(at::Tensor x) { return torch::relu(bn(conv(x))); }
//     ...
//     ddp::SyncBatchNorm bn{nullptr};
//   };
//
// It takes torch::nn::BatchNormOptions and has BatchNorm{1,2,3}d's parameters and buffers under
// the same names (weight, bias, running_mean, running_var, num_batches_tracked), so state dicts
// and checkpoints move between the two. Declaring the layer as ddp::SyncBatchNorm is the sure way.
// convert_sync_batchnorm (below) converts an existing model where the layers can be reached.
//
// Training, with a group of more than one rank: forward gathers every rank's (mean, variance,
// count), so ranks with different batch sizes are weighted by their counts (an empty batch still
// takes part, contributing nothing); the running statistics use the group's unbiased variance;
// backward all-reduces the per-channel sums of the output gradient and of its product with the
// centred input, and normalizes by the group's count. The gradients of weight and bias stay
// local: DistributedDataParallel averages them. One small collective per layer per pass (the
// layers of a chain cannot share one: each needs the previous one's result). Every rank of the
// group must call forward (and backward) the same number of times, in the same order of layers.
// Inside ddp::join, while some ranks have run out of inputs, the ranks still training exchange
// their statistics among themselves (point to point), so the others need not take part.
//
// Eval mode, a group of one, and a process without a default group are plain batch norm (the
// same computation as torch::nn::BatchNorm2d's).
//
// Errors (InvalidArgument, before anything is sent): an input of fewer than 2 or more than 5
// dimensions, a channel count (dimension 1) other than num_features, one value per channel when
// training alone (and over the whole group, which every rank sees at once).
// Thread-safety: as any module.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <memory>
#include <ostream>

#include "ddp/process_group.h"

namespace ddp {

class SyncBatchNormImpl;

namespace detail {
std::shared_ptr<SyncBatchNormImpl> adopt_batch_norm(const torch::nn::BatchNormOptions& options,
                                                    std::shared_ptr<ProcessGroup> group,
                                                    const std::array<at::Tensor, 5>& tensors);
}

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  // `process_group`: the ranks whose statistics are combined (a subgroup from ddp::new_group, for
  // statistics within it); null: the default group, looked up at each training forward.
  explicit SyncBatchNormImpl(torch::nn::BatchNormOptions options,
                             std::shared_ptr<ProcessGroup> process_group = nullptr);

  // Registers the parameters (weight ones, bias zeros) and buffers (running_mean zeros,
  // running_var ones, num_batches_tracked 0), as BatchNorm does.
  void reset() override;
  void reset_running_stats();
  void reset_parameters();

  // `input`: [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W], with C = num_features.
  at::Tensor forward(const at::Tensor& input);

  void pretty_print(std::ostream& stream) const override;
  const std::shared_ptr<ProcessGroup>& process_group() const { return process_group_; }

  torch::nn::BatchNormOptions options;
  at::Tensor weight;               // affine only
  at::Tensor bias;                 // affine only
  at::Tensor running_mean;         // track_running_stats only
  at::Tensor running_var;          // track_running_stats only
  at::Tensor num_batches_tracked;  // track_running_stats only

 private:
  friend std::shared_ptr<SyncBatchNormImpl> detail::adopt_batch_norm(const torch::nn::BatchNormOptions&,
                                                                     std::shared_ptr<ProcessGroup>,
                                                                     const std::array<at::Tensor, 5>&);
  // Registers `adopted` (weight, bias, running_mean, running_var, num_batches_tracked) as its own.
  SyncBatchNormImpl(torch::nn::BatchNormOptions options, std::shared_ptr<ProcessGroup> process_group,
                    const std::array<at::Tensor, 5>& adopted);
  std::shared_ptr<ProcessGroup> process_group_;
  std::array<at::Tensor, 5> adopted_;  // for the next reset(): tensors to register instead of new ones
};

TORCH_MODULE(SyncBatchNorm);

// PyTorch's SyncBatchNorm.convert_sync_batchnorm: replaces each torch::nn::BatchNorm{1,2,3}d in
// `module`'s tree by a SyncBatchNorm on `process_group` (null: the default group) holding the
// very same tensors (weight, bias, running statistics, num_batches_tracked: an optimizer built
// before still trains them) and the same training mode. Returns the number of layers converted.
//
// C++ can convert only what runs through the module registry: a layer in a Sequential,
// ModuleList or ModuleDict, or a child that its parent's forward finds by name. A layer that a
// member holder (`torch::nn::BatchNorm2d bn;` in the parent's class) or any other handle also
// points to would go on running as plain batch norm, so that is refused: InvalidArgument naming
// the layer, before anything is changed (declare such members as ddp::SyncBatchNorm instead).
// Also refused: `module` itself a BatchNorm. Convert before wrapping the model in
// DistributedDataParallel.
int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<ProcessGroup> process_group = nullptr);
template <typename M>
int convert_sync_batchnorm(const torch::nn::ModuleHolder<M>& module,
                           std::shared_ptr<ProcessGroup> process_group = nullptr) {
  return convert_sync_batchnorm(*module.ptr(), std::move(process_group));  // the module, not a const view
}
template <typename M>
int convert_sync_batchnorm(const std::shared_ptr<M>& module, std::shared_ptr<ProcessGroup> process_group = nullptr) {
  return convert_sync_batchnorm(*module, std::move(process_group));
}

}  // namespace ddp
