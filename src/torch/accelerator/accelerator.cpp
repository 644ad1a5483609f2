// The Accelerator (ddp/torch/accelerator.h): its shared state, the micro-step bookkeeping, and
// checkpoints written by the main process with every rank told the outcome.
#include "ddp/torch/accelerator.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "accelerator/settings.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/torch/checkpoint.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/state_dict.h"
#include "ddp/detail/strings.h"

namespace ddp {

namespace detail {

struct AcceleratorState {
  AcceleratorSettings settings;
  c10::Device device{c10::kCPU};
  bool joined_group = false;  // the Accelerator initialized the default group (and leaves it)
  int rank = 0, world = 1, local_rank = 0;
  DDPOptions ddp;
  amp::GradScaler scaler;
  std::unordered_set<const torch::nn::Module*> model_set;
  std::vector<std::shared_ptr<torch::nn::Module>> models;
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<std::shared_ptr<LoaderPosition>> loaders;
  std::shared_ptr<LoaderPosition> current_loader;  // the one that handed out the last batch
  // Accumulation (Accelerate's GradientState): micro-steps since the last synchronizing one.
  std::int64_t micro_step = 0;
  bool sync_gradients = true;
  bool in_accumulate = false;  // accumulate() was called for the micro-step under way
  bool unscaled = false;       // clip_grad_norm_ unscaled this step's gradients
  bool last_step_skipped = false;
  std::int64_t steps = 0;

  explicit AcceleratorState(amp::GradScalerOptions scaler_options) : scaler(std::move(scaler_options)) {}
};

void register_model(AcceleratorState& state, std::shared_ptr<torch::nn::Module> module) {
  if (!state.model_set.insert(module.get()).second) {
    throw Error(
        "Accelerator::prepare: this model was prepared before; prepare each model once and keep the "
        "handle prepare() returned");
  }
  state.models.push_back(std::move(module));
}

void register_loader(AcceleratorState& state, std::shared_ptr<LoaderPosition> position) {
  state.loaders.push_back(std::move(position));
}

void loader_batch(AcceleratorState& state, const std::shared_ptr<LoaderPosition>& position) {
  ++position->batches_done;
  state.current_loader = position;
}

namespace {

bool end_of_dataloader(const AcceleratorState& state) {
  const auto& p = state.current_loader;
  return p && p->batches_done >= p->batches_in_pass;
}

}  // namespace

bool accumulate_needs_sync(AcceleratorState& state) {
  if (end_of_dataloader(state)) {  // the pass's last batch always steps (Accelerate's behaviour)
    state.micro_step = 0;
    state.sync_gradients = true;
  } else {
    state.micro_step = (state.micro_step + 1) % state.settings.gradient_accumulation_steps;
    state.sync_gradients = state.micro_step == 0;
  }
  state.in_accumulate = true;
  return state.sync_gradients;
}

void optimizer_step(AcceleratorState& state, torch::optim::Optimizer& optimizer) {
  if (state.settings.gradient_accumulation_steps > 1 && !state.in_accumulate) {
    throw Error("AcceleratedOptimizer::step: gradient accumulation is on (" +
                std::to_string(state.settings.gradient_accumulation_steps) +
                " micro-steps per step) but this micro-step was not inside acc.accumulate(model); begin the "
                "loop's body with `auto scope = acc.accumulate(model);`");
  }
  if (!state.sync_gradients) return;  // a micro-step of an accumulation: the gradients keep adding up
  if (state.scaler.is_enabled()) {
    state.last_step_skipped = !state.scaler.step(optimizer);
    state.scaler.update();
  } else {
    optimizer.step();
    state.last_step_skipped = false;
  }
  if (!state.last_step_skipped) ++state.steps;
  state.unscaled = false;
  state.in_accumulate = false;
}

void optimizer_zero_grad(AcceleratorState& state, torch::optim::Optimizer& optimizer, bool set_to_none) {
  if (!state.sync_gradients) return;
  // By hand: LibTorch 1.13's zero_grad() has no set_to_none, 2.x's defaults to it.
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.mutable_grad().reset();
      } else {
        p.mutable_grad().detach_();
        p.mutable_grad().zero_();
      }
    }
  }
}

bool step_was_skipped(const AcceleratorState& state) { return state.last_step_skipped; }
c10::Device state_device(const AcceleratorState& state) { return state.device; }

amp::AutocastOptions forward_autocast(const AcceleratorState& state) {
  switch (state.settings.mixed_precision) {
    case MixedPrecision::kFP16: return {.dtype = at::kHalf};
    case MixedPrecision::kBF16: return {.dtype = at::kBFloat16};
    case MixedPrecision::kNo: break;
  }
  return {.enabled = false};
}

DDPOptions ddp_options(const AcceleratorState& state) { return state.ddp; }
bool distributed(const AcceleratorState& state) { return state.world > 1; }

at::Tensor outputs_to_float32(at::Tensor output) {
  if (output.defined() && (output.scalar_type() == at::kHalf || output.scalar_type() == at::kBFloat16)) {
    return output.to(at::kFloat);
  }
  return output;
}

}  // namespace detail

namespace {

std::optional<std::string> getenv_string(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value ? std::optional<std::string>(value) : std::nullopt;
}

// Rank 0's text, on every rank (at most 4 KiB).
std::string broadcast_text(const std::string& text, int rank) {
  constexpr std::int64_t kSize = 4096;
  auto buffer = at::zeros({kSize}, at::kByte);
  if (rank == 0) std::memcpy(buffer.data_ptr(), text.data(), std::min<std::size_t>(text.size(), kSize - 1));
  buffer = buffer.to(collective_device());
  broadcast(buffer, 0);
  buffer = buffer.cpu();
  return std::string(static_cast<const char*>(buffer.data_ptr()));
}

// Collective: every rank passed the same directory, the one the main process writes.
void check_same_directory(const char* caller, const std::string& dir, int rank, int world) {
  if (world == 1) return;
  auto all = at::empty({world}, at::kLong).to(collective_device());
  all_gather_into_tensor(
      all, at::full({1}, static_cast<std::int64_t>(detail::fnv1a(dir)), at::kLong).to(collective_device()));
  all = all.cpu();
  std::string differing;
  for (int r = 1; r < world; ++r) {
    if (all[r].item<std::int64_t>() != all[0].item<std::int64_t>())
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (differing.empty()) return;
  const std::string main_dir = broadcast_text(dir, rank);
  throw InvalidArgument(std::string(caller) + ": rank(s) " + differing +
                        " passed another directory than the main "
                        "process's '" +
                        main_dir + "'" + (rank == 0 ? "" : " (this rank: '" + dir + "')") +
                        "; only the main process writes, so every rank must pass the same directory (with several "
                        "nodes, one on a file system they share)");
}

// ddp's errors as they are (a refusal keeps its type and its advice); LibTorch's as an IOError.
[[noreturn]] void rethrow_as_error(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw IOError(e.what());
  }
}

// Collective: rank 0's failure (or success) becomes every rank's.
void agree_on_outcome(std::exception_ptr failure, const std::string& what, int rank, int world) {
  std::string message;
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  if (world > 1) message = broadcast_text(message, rank);
  if (rank == 0 && failure) std::rethrow_exception(failure);
  if (!message.empty()) throw IOError(what + " failed on the main process (rank 0): " + message);
}

torch::serialize::OutputArchive loader_archive(const detail::LoaderPosition& p) {
  auto s = p.sampler.state();
  std::int64_t epoch = s.epoch, consumed = std::min<std::int64_t>(p.batches_done * p.batch_size,
                                                                  static_cast<std::int64_t>(p.sampler.pass_size()));
  if (p.resumed) {  // restored and not iterated since: the restored position as it is
    consumed = s.consumed;
  } else if (p.batches_done == 0 ||
             p.batches_done >= p.batches_in_pass) {  // between passes: the next epoch from its start
    epoch = p.epoch + (p.batches_done > 0 ? 1 : 0);
    consumed = 0;
    s.start = 0;
  }
  torch::serialize::OutputArchive a;
  a.write("epoch", c10::IValue(epoch));
  a.write("seed", c10::IValue(static_cast<std::int64_t>(s.seed)));
  a.write("consumed", c10::IValue(consumed));
  a.write("start", c10::IValue(s.start));
  a.write("dataset_size", c10::IValue(s.dataset_size));
  a.write("num_replicas", c10::IValue(static_cast<std::int64_t>(s.num_replicas)));
  a.write("batches_done", c10::IValue(consumed == 0 ? std::int64_t{0} : p.batches_done));  // of this world size's pass
  a.write("batch_size", c10::IValue(p.batch_size));
  return a;
}

void restore_loader(detail::LoaderPosition& p, torch::serialize::InputArchive& a, std::size_t index) {
  auto read = [&](const char* key) {
    c10::IValue v;
    a.read(key, v);
    return v.toInt();
  };
  if (read("batch_size") != p.batch_size) {
    throw InvalidArgument("Accelerator::load_state: loader " + std::to_string(index) + " was saved with batch_size " +
                          std::to_string(read("batch_size")) + ", this one has " + std::to_string(p.batch_size) +
                          "; resume with the same batch size (prepare the loader with .batch_size = " +
                          std::to_string(read("batch_size")) + ")");
  }
  DistributedSamplerState s;
  s.epoch = read("epoch");
  s.seed = static_cast<std::uint64_t>(read("seed"));
  s.consumed = read("consumed");
  s.start = read("start");
  s.dataset_size = read("dataset_size");
  s.num_replicas = static_cast<int>(read("num_replicas"));
  p.epoch = s.epoch;
  p.batches_done = 0;
  p.resumed = false;
  if (s.consumed > 0) {  // mid-epoch: the sampler continues it (at another world size, a new pass over the rest)
    p.sampler.set_state(s);
    p.resumed = true;
    if (s.num_replicas == p.sampler.num_replicas()) p.batches_done = read("batches_done");
  }
}

at::Generator device_generator(const c10::Device& device) { return at::globalContext().defaultGenerator(device); }

// Every rank's generator state ([world, bytes]) gathered over the group.
at::Tensor gather_generator(const c10::Device& device, int world) {
  auto state = device_generator(device).get_state().contiguous();
  if (world == 1) return state.unsqueeze(0);
  auto all = at::empty({world * state.numel()}, at::kByte).to(collective_device());
  all_gather_into_tensor(all, state.to(collective_device()));
  return all.cpu().view({world, state.numel()});
}

}  // namespace

Accelerator::Accelerator(AcceleratorOptions options) {
  state_ = std::make_shared<detail::AcceleratorState>(options.scaler);
  auto& s = *state_;
  s.settings = detail::resolve_settings(options, getenv_string);
  const bool cuda = !s.settings.cpu && torch::cuda::is_available();
  if (!is_initialized()) {
    init_process_group(!options.backend.empty() ? options.backend : (cuda ? "cpu:gloo,cuda:nccl" : "gloo"),
                       {.timeout = options.timeout});
    s.joined_group = true;
  }
  s.rank = get_rank();
  s.world = get_world_size();
  s.local_rank = get_local_rank();
  s.device = cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(s.local_rank)) : c10::Device(c10::kCPU);
  s.ddp = std::move(options.ddp);
  if (cuda) s.ddp.device_ids = {s.local_rank};
  if (s.settings.mixed_precision != detail::AcceleratorSettings{}.mixed_precision) {
    // Refuses now, not at the first forward, a precision this device's LibTorch cannot autocast to.
    amp::Autocast probe(s.device.type(), detail::forward_autocast(s));
  }
  auto scaler_options = options.scaler;
  scaler_options.enabled = s.settings.mixed_precision == MixedPrecision::kFP16;
  s.scaler = amp::GradScaler(scaler_options);
}

Accelerator::~Accelerator() {
  try {
    end_training();
  } catch (const std::exception&) {
    // A destructor must not throw; end_training() called directly reports its error.
  }
}

void Accelerator::end_training() {
  if (state_ && state_->joined_group && is_initialized()) {
    destroy_process_group();
    state_->joined_group = false;
  }
}

AcceleratedOptimizer Accelerator::prepare(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  auto& s = *state_;
  for (const auto& known : s.optimizers) {
    if (known == optimizer) {
      throw Error("Accelerator::prepare: this optimizer was prepared before; prepare it once and keep the handle");
    }
  }
  if (s.scaler.is_enabled() && !s.optimizers.empty()) {
    throw Error(
        "Accelerator::prepare: a second optimizer with fp16 mixed precision; the Accelerator's one "
        "GradScaler updates its scale after each optimizer's step, so it serves one optimizer (use one "
        "optimizer with several parameter groups, or bf16)");
  }
  s.optimizers.push_back(optimizer);
  return AcceleratedOptimizer(std::move(optimizer), state_);
}

void Accelerator::backward(const at::Tensor& loss) {
  auto& s = *state_;
  const auto scaled = s.settings.gradient_accumulation_steps > 1
                          ? loss / static_cast<double>(s.settings.gradient_accumulation_steps)
                          : loss;
  s.scaler.scale(scaled).backward();
}

bool Accelerator::sync_gradients() const { return state_->sync_gradients; }

double Accelerator::clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type) {
  auto& s = *state_;
  if (!s.sync_gradients) {
    throw Error(
        "Accelerator::clip_grad_norm_: this micro-step does not synchronize gradients (an accumulation's "
        "micro-step): they are partial and still scaled; clip where acc.sync_gradients() is true");
  }
  if (s.scaler.is_enabled() && !s.unscaled) {
    for (auto& optimizer : s.optimizers) s.scaler.unscale_(*optimizer);
    s.unscaled = true;
  }
  return torch::nn::utils::clip_grad_norm_(parameters, max_norm, norm_type);
}

at::Tensor Accelerator::gather_for_metrics(const at::Tensor& tensor) {
  auto& s = *state_;
  auto input = tensor.dim() == 0 ? tensor.reshape({1}) : tensor.contiguous();
  at::Tensor all = input;
  if (s.world > 1) {
    const bool boolean = input.scalar_type() == at::kBool;  // travels as bytes (comparisons: predictions == labels)
    auto sent = boolean ? input.to(at::kByte) : input;
    auto sizes = sent.sizes().vec();
    sizes[0] *= s.world;
    const auto device = collective_device();
    all = at::empty(sizes, sent.options().device(device));
    all_gather_into_tensor(all, sent.to(device));
    all = all.to(tensor.device());
    if (boolean) all = all.to(at::kBool);
  }
  const auto& p = s.current_loader;
  if (!p || tensor.dim() == 0 || p->batches_done == 0) return all;
  const std::int64_t batch = p->batches_done - 1, rows = input.size(0);
  const std::int64_t expected =
      std::min<std::int64_t>(p->batch_size, static_cast<std::int64_t>(p->sampler.pass_size()) - batch * p->batch_size);
  if (rows != expected) return all;  // not the batch's rows: gathered whole
  const auto kept = detail::real_rows(static_cast<std::int64_t>(p->sampler.dataset_size()), s.world, p->pass_start,
                                      batch, p->batch_size, rows);
  if (static_cast<std::int64_t>(kept.size()) == all.size(0)) return all;
  return all.index_select(0, at::tensor(kept, at::kLong).to(all.device()));
}

void Accelerator::save_state(const std::string& dir,
                             const std::function<void(torch::serialize::OutputArchive&)>& extra) {
  auto& s = *state_;
  check_same_directory("Accelerator::save_state", dir, s.rank, s.world);
  const auto cpu_rng = gather_generator(c10::Device(c10::kCPU), s.world);
  const auto cuda_rng = s.device.is_cuda() ? gather_generator(s.device, s.world) : at::Tensor();
  Checkpoints checkpoints({.directory = dir, .keep = 2, .prefix = "state"});
  std::exception_ptr failure;
  try {
    checkpoints.save(s.steps, [&](torch::serialize::OutputArchive& archive) {
      archive.write("world_size", c10::IValue(static_cast<std::int64_t>(s.world)));
      archive.write("steps", c10::IValue(s.steps));
      archive.write("micro_step", c10::IValue(s.micro_step));
      for (std::size_t i = 0; i < s.models.size(); ++i) {
        torch::serialize::OutputArchive a;
        s.models[i]->save(a);
        archive.write("model_" + std::to_string(i), a);
      }
      for (std::size_t i = 0; i < s.optimizers.size(); ++i) {
        torch::serialize::OutputArchive a;
        s.optimizers[i]->save(a);
        archive.write("optimizer_" + std::to_string(i), a);
      }
      torch::serialize::OutputArchive scaler;
      s.scaler.save(scaler);
      archive.write("scaler", scaler);
      for (std::size_t i = 0; i < s.loaders.size(); ++i) {
        auto a = loader_archive(*s.loaders[i]);
        archive.write("loader_" + std::to_string(i), a);
      }
      archive.write("rng_cpu", cpu_rng);
      if (cuda_rng.defined()) archive.write("rng_cuda", cuda_rng);
      if (extra) {
        torch::serialize::OutputArchive a;
        extra(a);
        archive.write("extra", a);
      }
    });
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_outcome(failure, "Accelerator::save_state(\"" + dir + "\")", s.rank, s.world);
}

void Accelerator::load_state(const std::string& dir,
                             const std::function<void(torch::serialize::InputArchive&)>& extra) {
  auto& s = *state_;
  Checkpoints checkpoints({.directory = dir, .keep = 2, .prefix = "state"});
  std::exception_ptr failure;
  try {
    auto loaded = checkpoints.load_latest([&](torch::serialize::InputArchive& archive) {
      c10::IValue v;
      archive.read("steps", v);
      s.steps = v.toInt();
      archive.read("micro_step", v);
      s.micro_step = v.toInt();
      for (std::size_t i = 0; i < s.models.size(); ++i) {
        torch::serialize::InputArchive a;
        archive.read("model_" + std::to_string(i), a);
        s.models[i]->load(a);
        s.models[i]->to(s.device);
      }
      for (std::size_t i = 0; i < s.optimizers.size(); ++i) {
        torch::serialize::InputArchive a;
        archive.read("optimizer_" + std::to_string(i), a);
        s.optimizers[i]->load(a);
      }
      torch::serialize::InputArchive scaler;
      c10::IValue scale;
      if (archive.try_read("scaler", scaler) && scaler.try_read("scale", scale)) s.scaler.load(scaler);
      for (std::size_t i = 0; i < s.loaders.size(); ++i) {
        torch::serialize::InputArchive a;
        archive.read("loader_" + std::to_string(i), a);
        restore_loader(*s.loaders[i], a, i);
      }
      at::Tensor rng;
      archive.read("rng_cpu", rng);
      // A row of its own (clone): LibTorch 2.15's set_state crashed (SIGSEGV) on rank 1's row, a
      // view at an offset into the gathered tensor's storage; 1.13 took it.
      device_generator(c10::Device(c10::kCPU)).set_state(rng[s.rank % rng.size(0)].clone());
      if (s.device.is_cuda() && archive.try_read("rng_cuda", rng)) {
        device_generator(s.device).set_state(rng[s.rank % rng.size(0)].clone());
      }
      if (extra) {
        torch::serialize::InputArchive a;
        archive.read("extra", a);
        extra(a);
      }
    });
    if (!loaded) {
      throw IOError("Accelerator::load_state: " + dir + " holds no checkpoint (" + checkpoints.options().prefix +
                    "-*.ckpt); save_state(\"" + dir + "\") writes one");
    }
  } catch (...) {
    failure = std::current_exception();  // as it is: a refusal (InvalidArgument) names its fix
  }
  // Every rank learns whether any could not load, so that none trains on alone.
  if (s.world > 1) {
    auto failed = at::full({1}, failure ? s.rank + 1 : 0, at::kInt).to(collective_device());
    all_reduce(failed, ReduceOp::MAX);
    const int first = failed.cpu().item<int>();
    if (first > 0 && !failure) {
      throw IOError("Accelerator::load_state(\"" + dir + "\"): rank " + std::to_string(first - 1) +
                    " could not load the checkpoint (its error says why; every rank reads " + dir + " itself)");
    }
  }
  if (failure) rethrow_as_error(failure);
  s.sync_gradients = true;
  s.in_accumulate = false;
}

void Accelerator::save_module(const torch::nn::Module& module, const std::string& dir) {
  auto& s = *state_;
  check_same_directory("Accelerator::save_model", dir, s.rank, s.world);
  std::exception_ptr failure;
  if (s.rank == 0) {
    try {
      std::filesystem::create_directories(dir);
      save_state_dict(module, dir + "/model.safetensors",
                      {.format = WeightsFormat::SafeTensors, .metadata = {{"format", "pt"}}});
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_on_outcome(failure, "Accelerator::save_model(\"" + dir + "\")", s.rank, s.world);
}

c10::Device Accelerator::device() const { return state_->device; }
int Accelerator::process_index() const { return state_->rank; }
int Accelerator::local_process_index() const { return state_->local_rank; }
int Accelerator::num_processes() const { return state_->world; }
MixedPrecision Accelerator::mixed_precision() const { return state_->settings.mixed_precision; }
int Accelerator::gradient_accumulation_steps() const { return state_->settings.gradient_accumulation_steps; }
std::int64_t Accelerator::step() const { return state_->steps; }
void Accelerator::wait_for_everyone() const { barrier(); }

}  // namespace ddp
