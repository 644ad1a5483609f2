// ddp::DistributedDataParallel: PyTorch's DistributedDataParallel for LibTorch modules.
//
//   auto model = std::make_shared<Net>();            // any torch::nn::Module, or a ModuleHolder
//   ddp::DistributedDataParallel ddp_model(model, {.bucket_cap_mb = 25});
//   torch::optim::SGD optimizer(ddp_model->parameters(), 0.01);
//   auto loss = criterion(ddp_model->forward(x), y); // forward passes through, any signature
//   loss.backward();                                 // gradients are averaged over the ranks here
//   optimizer.step();
//   torch::save(ddp_model->module(), "model.pt");    // the wrapped model, no "module." prefix
//
// During backward, a hook on each parameter's gradient accumulator marks it ready; a bucket of
// gradients whose members are all ready is all-reduced asynchronously at once (buckets launch
// in order, the same on every rank) while backward goes on; the end of backward waits for every
// bucket and leaves the averaged gradients in .grad. Gradients accumulated under no_sync() are
// included in the next synchronized backward.
//
// Uneven inputs: run the training loop inside ddp::join({&ddp_model}, loop) (ddp/torch/join.h).
// static_graph: the first synchronized backward counts how often each parameter's gradient
// arrives (twice for a parameter used in two re-entrant backward passes, activation
// checkpointing's; never for an unused one) and launches every bucket at its end; later
// backward passes launch a bucket once its members have arrived that often, and throw Error
// naming the parameter when the graph has changed. Without it a gradient arriving twice in one
// backward is an error.
//
// Construction is collective (every rank of the group constructs with the same model) and
// checks that the ranks' parameters agree (count, names, shapes, dtypes): a mismatch throws
// MismatchError naming the first differing parameter and its shape on each rank. Then
// parameters and buffers are broadcast from rank 0 (unless init_sync is false).
//
// Thread-safety: one training loop per DDP object (as in PyTorch).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/process_group.h"
#include "ddp/torch/comm_hooks.h"
#include "ddp/torch/join.h"
#include "ddp/torch/straggler_report.h"

namespace ddp {

struct DDPOptions {
  std::shared_ptr<ProcessGroup> process_group;  // null: the default group
  std::vector<int> device_ids;                  // CUDA modules: the one device this rank uses; CPU: empty
  std::optional<int> output_device;             // CUDA modules: where outputs go (default: device_ids[0])
  bool broadcast_buffers = true;                // rank 0's buffers (BatchNorm statistics) before each forward
  double bucket_cap_mb = 25;                    // bucket size; the first bucket is 1 MB so that it starts early
  bool find_unused_parameters = false;          // parameters not reached from the outputs count as zero gradients
  bool gradient_as_bucket_view = false;  // PyTorch's bucket views (.grad always the buckets' memory); the default
                                         // uses them too where that is unseen (docs/DDP.md)
  bool static_graph = false;             // the same graph every iteration: learn it in the first backward
  bool init_sync = true;                 // broadcast parameters and buffers from rank 0 at construction
};

namespace detail {

// Everything DDP does, for any module type (src/torch/reducer/). Not for direct use.
class DDPCore {
 public:
  DDPCore(torch::nn::Module& module, DDPOptions options);
  ~DDPCore();
  DDPCore(const DDPCore&) = delete;
  DDPCore& operator=(const DDPCore&) = delete;

  void pre_forward(JoinContext* join);
  void post_forward(const std::vector<at::Tensor>& outputs);
  JoinIteration join_iteration() const;
  std::unique_ptr<JoinHook> join_hook(JoinContext& context);
  at::Device device() const;
  void set_no_sync(bool on);
  bool no_sync() const;
  void register_comm_hook(CommHook hook);
  const std::shared_ptr<ProcessGroup>& process_group() const;
  const DDPOptions& options() const;
  // Where forward's tensor arguments go (device_ids[0]) and its tensor outputs (output_device);
  // nullopt: where they are.
  std::optional<at::Device> input_device() const;
  std::optional<at::Device> output_device() const;
  // The current bucket plan (parameter indices in registration order, per bucket).
  std::vector<std::vector<std::size_t>> bucket_plan() const;
  StragglerReport straggler_report();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A forward argument on its way to the module: a tensor moved to `device` (kept here, passed on
// with the argument's own reference type), anything else passed through untouched.
template <typename T>
struct Placed {
  Placed(T&& value, const std::optional<at::Device>&) : ref(std::forward<T>(value)) {}
  T&& get() { return std::forward<T>(ref); }
  T&& ref;
};
template <typename T>
requires std::is_same_v<std::remove_cvref_t<T>, at::Tensor>
struct Placed<T> {
  Placed(T&& value, const std::optional<at::Device>& device)
      : moved(device && value.defined() && value.device() != *device ? value.to(*device) : at::Tensor(value)) {}
  T&& get() { return static_cast<T&&>(moved); }
  at::Tensor moved;
};

// Moves the tensors inside a forward's output (a tensor, or vectors/tuples/pairs of them) to `device`.
template <typename T>
void move_tensors(T& value, const at::Device& device) {
  using V = std::decay_t<T>;
  if constexpr (std::is_same_v<V, at::Tensor>) {
    if (value.defined() && value.device() != device) value = value.to(device);
  } else if constexpr (std::is_same_v<V, std::vector<at::Tensor>>) {
    for (auto& t : value) move_tensors(t, device);
  } else if constexpr (requires { std::tuple_size<V>::value; }) {
    std::apply([&](auto&... items) { (move_tensors(items, device), ...); }, value);
  }
}

// The tensors inside a forward's output (a tensor, or vectors/tuples/pairs of them), which tell
// find_unused_parameters what the graph reaches.
template <typename T>
void collect_tensors(const T& value, std::vector<at::Tensor>& out) {
  using V = std::decay_t<T>;
  if constexpr (std::is_base_of_v<at::Tensor, V>) {
    out.push_back(value);
  } else if constexpr (std::is_same_v<V, std::vector<at::Tensor>>) {
    out.insert(out.end(), value.begin(), value.end());
  } else if constexpr (requires { std::tuple_size<V>::value; }) {
    std::apply([&](const auto&... items) { (collect_tensors(items, out), ...); }, value);
  }
}

}  // namespace detail

// Suspends gradient synchronization while it lives (PyTorch's no_sync()): backward passes only
// accumulate local gradients, and the next backward outside the guard all-reduces them all.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(detail::DDPCore& core) : core_(&core), previous_(core.no_sync()) { core.set_no_sync(true); }
  NoSyncGuard(NoSyncGuard&& other) noexcept : core_(std::exchange(other.core_, nullptr)), previous_(other.previous_) {}
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;
  ~NoSyncGuard() {
    if (core_) core_->set_no_sync(previous_);
  }

 private:
  detail::DDPCore* core_;
  bool previous_;
};

template <typename M>
class DistributedDataParallelImpl : public torch::nn::Module, public Joinable {
 public:
  // Collective: see the top of this file. Throws InvalidArgument for bad options,
  // MismatchError when the ranks' models differ, and the group's errors.
  DistributedDataParallelImpl(std::shared_ptr<M> module, DDPOptions options = {})
      : module_(register_module("module", std::move(module))),
        core_(std::make_unique<detail::DDPCore>(*module_, std::move(options))) {}

  // Runs the wrapped module's forward with these arguments, around DDP's per-iteration work
  // (buffer broadcast before; finding unused parameters after). With device_ids, tensor
  // arguments are moved to that device first; with output_device, tensor outputs are moved there.
  template <typename... Args>
  auto forward(Args&&... args) {
    core_->pre_forward(notify_join_context(core_->join_iteration()));
    const auto device = core_->input_device();
    auto call = [&](auto&&... placed) { return module_->forward(placed.get()...); };
    auto output = call(detail::Placed<Args>(std::forward<Args>(args), device)...);
    std::vector<at::Tensor> tensors;
    detail::collect_tensors(output, tensors);
    core_->post_forward(tensors);
    if (const auto out = core_->output_device()) detail::move_tensors(output, *out);
    return output;
  }

  // The wrapped module: save this one (its parameter names have no "module." prefix).
  const std::shared_ptr<M>& module() const { return module_; }

  // Gradient accumulation without communication while the returned guard lives.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*core_); }

  // Replaces the default all-reduce of each bucket (see ddp/torch/comm_hooks.h). Throws Error
  // when a hook is already registered or a backward pass has already run.
  void register_comm_hook(CommHook hook) { core_->register_comm_hook(std::move(hook)); }

  const std::shared_ptr<ProcessGroup>& process_group() const { return core_->process_group(); }
  const DDPOptions& options() const { return core_->options(); }
  std::vector<std::vector<std::size_t>> bucket_plan() const { return core_->bucket_plan(); }

  // Collective (every rank of the group calls it at the same point, like an all_reduce): which
  // rank is the slowest over the synchronized steps since the previous call, and where its time
  // goes (ddp/torch/straggler_report.h). Every rank gets the same report; report.text is the line
  // to print. Timing the steps costs a few clock reads per step; the report one small all_gather.
  // Under ddprun, rank 0's last one appears in the launcher's summary.
  StragglerReport straggler_report() { return core_->straggler_report(); }

  // Joinable (ddp/torch/join.h): what ddp::join needs of the model.
  std::unique_ptr<JoinHook> join_hook(JoinContext& context) override { return core_->join_hook(context); }
  at::Device join_device() const override { return core_->device(); }
  std::shared_ptr<ProcessGroup> join_process_group() const override { return core_->process_group(); }

 private:
  std::shared_ptr<M> module_;
  std::unique_ptr<detail::DDPCore> core_;
};

// The holder: `ddp_model->forward(x)`, `ddp_model->parameters()`, `ddp_model->module()`.
template <typename M>
class DistributedDataParallel : public torch::nn::ModuleHolder<DistributedDataParallelImpl<M>> {
  using Holder = torch::nn::ModuleHolder<DistributedDataParallelImpl<M>>;

 public:
  DistributedDataParallel(std::shared_ptr<M> module, DDPOptions options = {})
      : Holder(std::make_shared<DistributedDataParallelImpl<M>>(std::move(module), std::move(options))) {}
  DistributedDataParallel(const torch::nn::ModuleHolder<M>& module, DDPOptions options = {})
      : DistributedDataParallel(module.ptr(), std::move(options)) {}
};

template <typename M>
DistributedDataParallel(std::shared_ptr<M>, DDPOptions = {}) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(const torch::nn::ModuleHolder<M>&, DDPOptions = {}) -> DistributedDataParallel<M>;

}  // namespace ddp
