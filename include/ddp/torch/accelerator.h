// One training program for a laptop's CPU, one GPU, many GPUs and many nodes, as Hugging Face
// Accelerate's Accelerator: the device, the process group, DDP, the sampler, mixed precision,
// gradient accumulation and checkpoints are chosen at launch, not written into the loop.
//
//   ddp::Accelerator acc;                                  // the group from the launcher (or a group of one)
//   auto model = acc.prepare(Net());                       // on acc.device(); in DDP when the world is > 1
//   auto optimizer = acc.prepare(torch::optim::SGD(model->parameters(), 0.1));
//   auto loader = acc.prepare(std::move(dataset), {.batch_size = 64});   // a DistributedSampler's shard
//   for (int epoch = 0; epoch < 3; ++epoch) {
//     for (auto& batch : loader) {                         // on acc.device(); set_epoch done
//       auto step = acc.accumulate(model);                 // no_sync on all but the last micro-step
//       acc.backward(torch::cross_entropy_loss(model(batch.data), batch.target));
//       optimizer.step();                                  // only where the gradients were synchronized
//       optimizer.zero_grad();
//     }
//     acc.save_state("ckpt");                              // rank 0 writes; resumable at any world size
//   }
//
//   ddprun --nproc_per_node=2 --mixed_precision bf16 --gradient_accumulation_steps 4 ./train
//
// Settings: what the code sets in AcceleratorOptions wins; otherwise the launch's, from the
// variables `accelerate launch` and `ddprun`'s flags of the same names set (ACCELERATE_MIXED_PRECISION:
// no, fp16, bf16; ACCELERATE_GRADIENT_ACCUMULATION_STEPS; ACCELERATE_USE_CPU); otherwise no mixed
// precision, one step per batch, and a GPU when there is one.
//
// Where Accelerate's Python shapes do not fit C++ (docs/ACCELERATE.md): prepare() takes one object
// and returns a handle of its own type instead of rewrapping in place (a C++ object cannot change
// its type); the model's handle is always the same type, with DDP inside only when the world has
// more than one process; a loader is built by prepare() from a dataset, since a torch::data loader
// cannot be given another sampler after it is made.
//
// Not thread-safe: one Accelerator per process, used by the training loop's thread.
#pragma once

#include <torch/data/dataloader.h>
#include <torch/data/datasets/map.h>
#include <torch/data/transforms/stack.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ddp/error.h"
#include "ddp/torch/amp.h"
#include "ddp/torch/distributed_data_parallel.h"
#include "ddp/torch/distributed_sampler.h"

namespace ddp {

enum class MixedPrecision {
  kNo,    // float32 throughout
  kFP16,  // float16 autocast in forward, a GradScaler (CUDA; the CPU from LibTorch 2.x)
  kBF16,  // bfloat16 autocast in forward; float32's range, so no scaler
};

// "no", "fp16", "bf16" (Accelerate's names). Throws InvalidArgument naming `where` for others.
MixedPrecision parse_mixed_precision(const std::string& text, const std::string& where);
const char* to_string(MixedPrecision precision);

struct AcceleratorOptions {
  std::optional<MixedPrecision> mixed_precision;   // default: ACCELERATE_MIXED_PRECISION, else kNo
  std::optional<int> gradient_accumulation_steps;  // default: ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else 1
  std::optional<bool> cpu;                         // true: the CPU even with a GPU; default: ACCELERATE_USE_CPU
  // The process group's backend when the Accelerator creates it: default "cpu:gloo,cuda:nccl" on
  // a GPU, "gloo" on the CPU. An already initialized default group is used as it is.
  std::string backend;
  std::chrono::milliseconds timeout = std::chrono::minutes(30);  // rendezvous and every collective
  DDPOptions ddp;                 // how prepare() wraps a model in DDP (device_ids are set for a GPU)
  amp::GradScalerOptions scaler;  // fp16's GradScaler (its `enabled` is the Accelerator's to set)
};

struct LoaderOptions {
  std::int64_t batch_size = 1;  // per process
  bool shuffle = true;          // a new permutation every epoch, the same on every rank
  std::uint64_t seed = 0;
  bool drop_last = false;
  std::size_t workers = 0;  // torch::data worker threads
};

namespace detail {

// What the Accelerator and the handles it gives out share: handles stay valid after a move of
// the Accelerator and keep what they need alive.
struct AcceleratorState;

// A prepared loader's position, which save_state() keeps and load_state() restores.
struct LoaderPosition {
  DistributedSampler sampler;
  std::int64_t batch_size;
  std::int64_t epoch = 0;         // the epoch of the pass under way, or of the next
  std::int64_t batches_done = 0;  // of the pass under way on this rank
  std::int64_t batches_in_pass = 0;
  std::int64_t pass_start = 0;  // samples of the epoch the job had consumed when the pass began
  bool resumed = false;         // the next pass continues a restored position (no set_epoch)
};

// Which rows of an all_gather of every rank's `rows` outputs for batch `batch` of a pass (rank
// after rank) are real samples, not the sampler's padding: rank r's row i holds position
// start + (batch * batch_size + i) * world + r of the epoch's sequence, padding from
// dataset_size on. Pure.
std::vector<std::int64_t> real_rows(std::int64_t dataset_size, int world, std::int64_t start, std::int64_t batch,
                                    std::int64_t batch_size, std::int64_t rows);

void register_model(AcceleratorState& state, std::shared_ptr<torch::nn::Module> module);
void register_loader(AcceleratorState& state, std::shared_ptr<LoaderPosition> position);
void loader_batch(AcceleratorState& state, const std::shared_ptr<LoaderPosition>& position);  // a batch was handed out
bool accumulate_needs_sync(AcceleratorState& state);  // the micro-step begins: true when it synchronizes
void optimizer_step(AcceleratorState& state, torch::optim::Optimizer& optimizer);
void optimizer_zero_grad(AcceleratorState& state, torch::optim::Optimizer& optimizer, bool set_to_none);
bool step_was_skipped(const AcceleratorState& state);
c10::Device state_device(const AcceleratorState& state);
amp::AutocastOptions forward_autocast(const AcceleratorState& state);
DDPOptions ddp_options(const AcceleratorState& state);
bool distributed(const AcceleratorState& state);
at::Tensor outputs_to_float32(at::Tensor output);
template <typename T>
T outputs_to_float32(T output) {
  return output;
}  // other outputs pass as they are

}  // namespace detail

// A prepared model: the module on the Accelerator's device, inside DistributedDataParallel when
// the world has more than one process. model(x) runs forward under the mixed precision's
// autocast and returns float32 outputs (Accelerate's convert_outputs_to_fp32); model-> is the
// unwrapped module (parameters(), train(), eval(): Accelerate's unwrap_model).
template <typename M>
class AcceleratedModel {
 public:
  AcceleratedModel(std::shared_ptr<M> module, std::shared_ptr<detail::AcceleratorState> state)
      : module_(std::move(module)), state_(std::move(state)) {
    if (detail::distributed(*state_)) ddp_.emplace(module_, detail::ddp_options(*state_));
  }

  template <typename... Args>
  auto forward(Args&&... args) {
    amp::Autocast autocast(detail::state_device(*state_).type(), detail::forward_autocast(*state_));
    auto output = ddp_ ? (*ddp_)->forward(std::forward<Args>(args)...) : module_->forward(std::forward<Args>(args)...);
    return detail::outputs_to_float32(std::move(output));
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  M* operator->() const { return module_.get(); }
  const std::shared_ptr<M>& module() const { return module_; }  // what to save or hand to Python
  // The DDP wrapper, when there is one (world > 1): straggler_report(), register_comm_hook().
  DistributedDataParallel<M>* ddp() { return ddp_ ? &*ddp_ : nullptr; }

  // Gradient accumulation without communication while the guard lives (no-op without DDP).
  std::optional<NoSyncGuard> no_sync() {
    if (!ddp_) return std::nullopt;
    return std::optional<NoSyncGuard>(std::in_place, (*ddp_)->no_sync());
  }

 private:
  std::shared_ptr<M> module_;
  std::shared_ptr<detail::AcceleratorState> state_;
  std::optional<DistributedDataParallel<M>> ddp_;
};

// A prepared optimizer: step() and zero_grad() act only on a micro-step whose gradients were
// synchronized (the last of an accumulation), step() through the GradScaler with fp16.
class AcceleratedOptimizer {
 public:
  AcceleratedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                       std::shared_ptr<detail::AcceleratorState> state)
      : optimizer_(std::move(optimizer)), state_(std::move(state)) {}

  // Throws Error when gradient accumulation is on and the micro-step was not in accumulate().
  void step() { detail::optimizer_step(*state_, *optimizer_); }
  void zero_grad(bool set_to_none = true) { detail::optimizer_zero_grad(*state_, *optimizer_, set_to_none); }
  // Whether the last step() was skipped by the GradScaler (an inf or NaN gradient: the whole
  // accumulated window is then dropped by zero_grad(), as in PyTorch).
  bool step_was_skipped() const { return detail::step_was_skipped(*state_); }

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  torch::optim::Optimizer* operator->() { return optimizer_.get(); }

 private:
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<detail::AcceleratorState> state_;
};

// A prepared loader: this rank's shard of the dataset (a DistributedSampler), batches stacked
// and on the Accelerator's device. Each `for` over it is a pass over the next epoch (set_epoch
// done), or the rest of a pass that load_state() restored; a `for` left early (break) starts
// that epoch again. Move-only; the Accelerator keeps its position for save_state().
template <typename Dataset>
class AcceleratedLoader {
  using Stacked = torch::data::datasets::MapDataset<Dataset, torch::data::transforms::Stack<>>;
  using Loader = torch::data::StatelessDataLoader<Stacked, DistributedSampler>;
  using Batch = torch::data::Example<>;
  using LoaderIterator = decltype(std::declval<Loader&>().begin());

 public:
  class Iterator {
   public:
    // `sentinel`: end(), which fetches nothing.
    Iterator(AcceleratedLoader* owner, LoaderIterator it, bool sentinel) : owner_(owner), it_(std::move(it)) {
      if (!sentinel) fetch();
    }
    Batch& operator*() { return batch_; }
    Batch* operator->() { return &batch_; }
    Iterator& operator++() {
      ++it_;
      fetch();
      return *this;
    }
    bool operator!=(const Iterator& other) const { return it_ != other.it_; }
    bool operator==(const Iterator& other) const { return it_ == other.it_; }

   private:
    void fetch() {
      if (it_ == owner_->loader_->end()) {
        owner_->end_pass();
        return;
      }
      const auto device = detail::state_device(*owner_->state_);
      batch_ = {it_->data.to(device), it_->target.to(device)};
      detail::loader_batch(*owner_->state_, owner_->position_);
    }
    AcceleratedLoader* owner_;
    LoaderIterator it_;
    Batch batch_;
  };

  AcceleratedLoader(Dataset dataset, const LoaderOptions& options, std::shared_ptr<detail::AcceleratorState> state)
      : state_(std::move(state)) {
    const auto size = dataset.size();
    if (!size.has_value()) {
      throw InvalidArgument(
          "Accelerator::prepare: the dataset has no size (its size() returned nullopt); a "
          "DistributedSampler shards a dataset of known size: give the dataset a size(), or "
          "shard a stream yourself by rank");
    }
    if (options.batch_size < 1) {
      throw InvalidArgument("Accelerator::prepare: batch_size " + std::to_string(options.batch_size) +
                            " for a loader; it must be 1 or more (per process)");
    }
    DistributedSampler sampler(*size,
                               {.shuffle = options.shuffle, .seed = options.seed, .drop_last = options.drop_last});
    position_ = std::make_shared<detail::LoaderPosition>(detail::LoaderPosition{sampler, options.batch_size});
    loader_ = std::make_unique<Loader>(
        std::move(dataset).map(torch::data::transforms::Stack<>()), sampler,
        torch::data::DataLoaderOptions(static_cast<std::size_t>(options.batch_size)).workers(options.workers));
    detail::register_loader(*state_, position_);
  }

  Iterator begin() {
    auto& p = *position_;
    if (!p.resumed) {
      p.sampler.set_epoch(p.epoch);
      p.batches_done = 0;
    }
    p.resumed = false;
    auto it = loader_->begin();  // the sampler's reset(): a new pass, or the restored one
    p.pass_start = p.sampler.state().start;
    p.batches_in_pass = (static_cast<std::int64_t>(p.sampler.pass_size()) + p.batch_size - 1) / p.batch_size;
    return Iterator(this, std::move(it), false);
  }
  Iterator end() { return Iterator(this, loader_->end(), true); }

  // Batches per pass on this rank (PyTorch's len(loader)), and the sampler (state(), epoch()).
  std::int64_t size() const {
    return (static_cast<std::int64_t>(position_->sampler.size()) + position_->batch_size - 1) / position_->batch_size;
  }
  const DistributedSampler& sampler() const { return position_->sampler; }
  std::int64_t epoch() const { return position_->epoch; }

 private:
  void end_pass() {  // the iterator reached the pass's end (an empty pass included: the epoch moves on)
    if (position_->batches_done >= position_->batches_in_pass) {
      ++position_->epoch;
      position_->batches_done = 0;
    }
  }
  std::shared_ptr<detail::AcceleratorState> state_;
  std::shared_ptr<detail::LoaderPosition> position_;
  std::unique_ptr<Loader> loader_;
};

// The scope of one micro-step (Accelerate's `with accelerator.accumulate(model)`): while it
// lives, backward() synchronizes the gradients only on the last micro-step of an accumulation
// (every gradient_accumulation_steps-th, and the last batch of a pass).
class AccumulationScope {
 public:
  AccumulationScope(bool sync, std::optional<NoSyncGuard> no_sync) : sync_(sync), no_sync_(std::move(no_sync)) {}
  bool sync_gradients() const { return sync_; }

 private:
  bool sync_;
  std::optional<NoSyncGuard> no_sync_;
};

class Accelerator {
 public:
  // Joins the process group from the environment (ddprun, torchrun, Slurm, Open MPI; none: a
  // group of one) unless one is initialized, and picks the device: cuda:LOCAL_RANK when CUDA is
  // available (and not `cpu`), else the CPU. Throws InvalidArgument for a bad setting (naming the
  // variable it came from), for fp16 on a CPU whose LibTorch cannot autocast to it (1.13: use
  // bf16), and the group's errors.
  explicit Accelerator(AcceleratorOptions options = {});
  // Leaves the process group if it joined it (end_training()).
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // The model on the device, in DDP when the world is > 1. Collective then (DDP starts every rank
  // from rank 0's weights). Throws Error when this module was prepared before.
  template <typename M>
  AcceleratedModel<M> prepare(const torch::nn::ModuleHolder<M>& model) {
    return prepare(model.ptr());
  }
  template <typename M, typename = std::enable_if_t<std::is_base_of_v<torch::nn::Module, M>>>
  AcceleratedModel<M> prepare(std::shared_ptr<M> module) {
    module->to(device());
    detail::register_model(*state_, module);
    return AcceleratedModel<M>(std::move(module), state_);
  }
  // An optimizer, by value (moved into the handle) or shared. Throws Error when it was prepared
  // before, or when fp16's one GradScaler would serve a second optimizer.
  template <typename O, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, O>>>
  AcceleratedOptimizer prepare(O optimizer) {
    return prepare(std::shared_ptr<torch::optim::Optimizer>(std::make_shared<O>(std::move(optimizer))));
  }
  AcceleratedOptimizer prepare(std::shared_ptr<torch::optim::Optimizer> optimizer);
  // A loader over this rank's shard of `dataset` (whose examples are torch::data::Example<>).
  // Throws InvalidArgument for a dataset without a size or a batch_size below 1.
  template <typename Dataset, typename = std::enable_if_t<!std::is_base_of_v<torch::nn::Module, Dataset> &&
                                                          !std::is_base_of_v<torch::optim::Optimizer, Dataset>>>
  AcceleratedLoader<Dataset> prepare(Dataset dataset, const LoaderOptions& options) {
    return AcceleratedLoader<Dataset>(std::move(dataset), options, state_);
  }

  // The micro-step's scope (see AccumulationScope); call it first in the loop's body.
  template <typename M>
  [[nodiscard]] AccumulationScope accumulate(AcceleratedModel<M>& model) {
    const bool sync = detail::accumulate_needs_sync(*state_);
    return AccumulationScope(sync, sync ? std::nullopt : model.no_sync());
  }

  // loss / gradient_accumulation_steps, scaled by the GradScaler with fp16, then backward.
  void backward(const at::Tensor& loss);
  // Whether the micro-step under way synchronizes gradients (and steps the optimizer).
  bool sync_gradients() const;
  // Clips the gradients' total norm, unscaling them first with fp16. Returns the norm before
  // clipping. Throws Error on a micro-step that does not synchronize (its gradients are partial
  // and still scaled: clip where sync_gradients() is true).
  double clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type = 2.0);

  // Every rank's `tensor` (same shape on every rank), concatenated along dim 0 in rank order
  // (a 0-dim tensor becomes one row per rank). Right after a prepared loader's batch, the rows
  // that are the sampler's padding (repeated samples at the end of an epoch) are dropped, so that
  // an epoch's metrics count every sample once; a tensor whose first dimension is not the batch's
  // is gathered whole. Collective.
  at::Tensor gather_for_metrics(const at::Tensor& tensor);

  // Checkpoints. save_state(dir): the prepared models, optimizers, the scaler, every loader's
  // position, the accumulation's micro-step and every rank's random generators, as one ddp
  // checkpoint in `dir` (written atomically by the main process, the newest two kept; `extra`
  // adds your own entries). Collective: every rank passes the same `dir` (the main process alone
  // writes it: with several nodes, a shared file system); a rank with another gets
  // InvalidArgument on every rank, and a failed write IOError on every rank. load_state(dir):
  // the newest intact checkpoint there (each rank reads it: every rank must reach `dir`),
  // resumable at another world size (the loaders continue the epoch; a rank's generators are
  // those of rank (rank % the saved world size)). Throws IOError when `dir` holds no checkpoint,
  // on every rank when one cannot read it.
  void save_state(const std::string& dir, const std::function<void(torch::serialize::OutputArchive&)>& extra = {});
  void load_state(const std::string& dir, const std::function<void(torch::serialize::InputArchive&)>& extra = {});
  // The unwrapped model's weights as dir/model.safetensors (Python's safetensors.torch.load_file
  // reads them; PyTorch's parameter names), written by the main process. Collective, as save_state.
  template <typename M>
  void save_model(const AcceleratedModel<M>& model, const std::string& dir) {
    save_module(*model.module(), dir);
  }

  c10::Device device() const;
  int process_index() const;        // the rank
  int local_process_index() const;  // LOCAL_RANK
  int num_processes() const;        // the world size
  bool is_main_process() const { return process_index() == 0; }
  bool is_local_main_process() const { return local_process_index() == 0; }
  MixedPrecision mixed_precision() const;
  int gradient_accumulation_steps() const;
  // Optimizer steps taken (not skipped) since the start, restored by load_state().
  std::int64_t step() const;

  // Prints on the main process only (its arguments streamed, then a newline).
  template <typename... Args>
  void print(const Args&... args) const {
    if (!is_main_process()) return;
    std::ostringstream line;
    (line << ... << args);
    std::cout << line.str() << std::endl;
  }
  void wait_for_everyone() const;  // a barrier
  // Leaves the process group if the Accelerator joined it. Called by the destructor.
  void end_training();

 private:
  void save_module(const torch::nn::Module& module, const std::string& dir);
  std::shared_ptr<detail::AcceleratorState> state_;
};

}  // namespace ddp
