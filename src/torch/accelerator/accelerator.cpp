// The Accelerator (ddp/torch/accelerator.h): joining the group, what prepare() registers, and
// gathering metrics. Gradient accumulation is gradient_accumulation.cpp, checkpoints saved_state.cpp.
#include "ddp/torch/accelerator.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>

#include "accelerator/state.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/torch/collectives.h"

namespace ddp {

namespace detail {

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

c10::Device Accelerator::device() const { return state_->device; }
int Accelerator::process_index() const { return state_->rank; }
int Accelerator::local_process_index() const { return state_->local_rank; }
int Accelerator::num_processes() const { return state_->world; }
MixedPrecision Accelerator::mixed_precision() const { return state_->settings.mixed_precision; }
int Accelerator::gradient_accumulation_steps() const { return state_->settings.gradient_accumulation_steps; }
std::int64_t Accelerator::step() const { return state_->steps; }
void Accelerator::wait_for_everyone() const { barrier(); }

}  // namespace ddp
