// ddp::ZeroRedundancyOptimizer: PyTorch's ZeroRedundancyOptimizer (ZeRO stage 1) for LibTorch.
// It wraps any torch::optim optimizer type and shards its state over the ranks: each rank keeps
// the state (Adam's two moments, SGD's momentum) of its partition of the parameters only, about
// 1 / world size of it, and updates only those parameters; step() then broadcasts every
// partition from its owner, so that all ranks end with the same parameters.
//
//   ddp::DistributedDataParallel ddp_model(model);
//   ddp::ZeroRedundancyOptimizer<torch::optim::Adam> zero(ddp_model->parameters(), torch::optim::AdamOptions(1e-3));
//   zero.zero_grad();
//   loss.backward();                         // DDP: every rank holds the averaged gradients
//   zero.step();                             // this rank's shard, then every shard's broadcast
//   zero.consolidate_state_dict(0);          // collective: the whole state on rank 0 ...
//   if (ddp::get_rank() == 0) torch::save(zero, "optimizer.pt");   // ... which saves it
//   torch::load(zero, "optimizer.pt");       // every rank, any world size: keeps its own shard
//
// The partition is PyTorch's: per parameter group, parameters sorted by size (largest first,
// ties in order), each to the rank with the smallest running total (counted over all groups).
// The saved state is LibTorch's format for the optimizer type over all parameters, so a plain,
// unsharded optimizer over the same parameters loads it too, and vice versa.
//
// Construction is collective only in that every rank must pass the same parameters (the
// partition is computed locally, the same everywhere); step() and consolidate_state_dict() are
// collectives over the group. With ddp::amp::GradScaler, scaler.step(zero) agrees on skipping
// across the group (the found-inf flag is all-reduced). Parameters must be dense, of one dtype
// and on one device (PyTorch's rule). Without init_process_group and without a group, it is a
// group of one. Not thread-safe.
//
// Inside ddp::join (uneven inputs) list it after the DDP model, as in PyTorch:
//   ddp::join({&ddp_model, &zero}, [&] { ... zero.step(); ... });
// A rank that has run out of inputs keeps stepping its shard once per iteration of the others,
// with the averaged gradients DDP's join hook leaves in .grad, and broadcasts it: the result is
// that of the unsharded optimizer. (PyTorch's joined ranks step with their own last gradients,
// since its DDP join hook drops the averaged ones.) Each iteration must call step() once.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/process_group.h"
#include "ddp/torch/join.h"

namespace ddp {

struct ZeroRedundancyOptions {
  std::shared_ptr<ProcessGroup> process_group;  // null: the default group (none: a group of one)
  // true: each rank's partition lives in one flat tensor and the parameters become views into it,
  // so step() broadcasts it without copies (PyTorch's parameters_as_bucket_view). false: the
  // parameters keep their storage and each partition is copied into a flat message and out again.
  bool parameters_as_bucket_view = false;
};

namespace detail {

// PyTorch's partition (ZeroRedundancyOptimizer._partition_parameters): numels[g][i] is the
// element count of parameter i of group g; returns [rank][group] -> indices into the group, in
// the order they were assigned. Pure.
std::vector<std::vector<std::vector<std::size_t>>> partition_parameters(
    const std::vector<std::vector<std::int64_t>>& numels, int world_size);

// Everything that does not depend on the optimizer type (src/torch/zero/). Not for direct use.
class ZeroBase : public torch::optim::Optimizer, public Joinable {
 public:
  using Factory =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

  // One optimizer step on this rank's shard (with `closure`, if any, passed to it), then the
  // broadcast of every rank's shard: one flat message per rank, all issued asynchronously, then
  // waited for. Collective. Returns the local optimizer's result.
  at::Tensor step(LossClosure closure = nullptr) override;

  // Joinable (ddp/torch/join.h): the hook steps (PyTorch's _ZeROJoinHook). Joining needs a
  // process group: a group of one without init_process_group has none to join on.
  std::unique_ptr<JoinHook> join_hook(JoinContext& context) override;
  at::Device join_device() const override;
  std::shared_ptr<ProcessGroup> join_process_group() const override { return group_; }
  // Whether a ddp::join that lists this optimizer is running.
  bool in_join() const { return join_context() != nullptr; }

  // Collective: gathers every rank's shard of the optimizer state on rank `to`, in CPU memory,
  // so that save() there writes the whole state. Other ranks drop an earlier consolidation.
  // Throws InvalidArgument for a rank outside the group.
  void consolidate_state_dict(int to = 0);

  // Writes the consolidated state (LibTorch's format for the optimizer type, over all
  // parameters). Throws Error unless consolidate_state_dict(this rank) ran before; it may be
  // stale if steps followed it.
  void save(torch::serialize::OutputArchive& archive) const override;

  // Reads a whole optimizer state (saved by save() at any world size, or by the plain optimizer
  // over the same parameters) and keeps this rank's shard of it. The parameter groups' options
  // stay as they are (LibTorch's load does not restore them either). Throws MismatchError when
  // the state's parameter groups do not match this optimizer's. For CUDA parameters, load with
  // torch::load(zero, path, device), as for any LibTorch optimizer.
  void load(torch::serialize::InputArchive& archive) override;

  // Adds a group, partitioned after the existing ones (whose assignment does not change).
  // Call it on every rank alike. Hides Optimizer::add_param_group (not virtual in LibTorch):
  // call it through the ZeroRedundancyOptimizer.
  void add_param_group(const torch::optim::OptimizerParamGroup& param_group);

  // The optimizer over this rank's shard (one group per group, possibly empty).
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  const torch::optim::Optimizer& local_optimizer() const { return *local_; }
  // The rank that updates parameter `index` of group `group`.
  int owner(std::size_t group, std::size_t index) const;
  // [rank][group] -> parameter indices in the group.
  const std::vector<std::vector<std::vector<std::size_t>>>& partition() const { return partition_; }
  // The group (null for a group of one without init_process_group), rank and world size.
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }

 protected:
  ZeroBase(std::vector<torch::optim::OptimizerParamGroup> param_groups,
           std::unique_ptr<torch::optim::OptimizerOptions> defaults, ZeroRedundancyOptions options, Factory factory);

 private:
  std::vector<torch::optim::OptimizerParamGroup> groups_of(int rank) const;
  void repartition();
  void build_buckets();
  void sync_options(std::vector<torch::optim::OptimizerParamGroup>& from,
                    std::vector<torch::optim::OptimizerParamGroup>& to) const;
  void broadcast_shards();

  ZeroRedundancyOptions options_;
  Factory factory_;
  std::shared_ptr<ProcessGroup> group_;
  int rank_ = 0, world_ = 1;
  std::vector<std::vector<std::vector<std::size_t>>> partition_;
  std::vector<at::Tensor> buckets_;  // per rank, with parameters_as_bucket_view
  std::unique_ptr<torch::optim::Optimizer> local_;
  std::unique_ptr<torch::optim::Optimizer> consolidated_;  // on the rank consolidated to
};

}  // namespace detail

// `O` is any torch::optim::Optimizer type constructible from (std::vector<OptimizerParamGroup>,
// its options): SGD, Adam, AdamW, RMSprop, Adagrad, or one of your own.
template <typename O>
class ZeroRedundancyOptimizer : public detail::ZeroBase {
 public:
  // `defaults` are O's options (torch::optim::AdamOptions(1e-3)); groups without options get them.
  // Throws InvalidArgument for no parameters or parameters of differing dtypes or devices.
  template <typename Options>
  ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> param_groups, const Options& defaults,
                          ZeroRedundancyOptions options = {})
      : ZeroBase(std::move(param_groups), std::make_unique<Options>(defaults), std::move(options),
                 [defaults](std::vector<torch::optim::OptimizerParamGroup> groups)
                     -> std::unique_ptr<torch::optim::Optimizer> {
                   return std::make_unique<O>(std::move(groups), defaults);
                 }) {}

  template <typename Options>
  ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters, const Options& defaults,
                          ZeroRedundancyOptions options = {})
      : ZeroRedundancyOptimizer(
            std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(std::move(parameters))},
            defaults, std::move(options)) {}

  // The local optimizer, as its own type.
  O& local() { return static_cast<O&>(local_optimizer()); }
  const O& local() const { return static_cast<const O&>(local_optimizer()); }
};

}  // namespace ddp
