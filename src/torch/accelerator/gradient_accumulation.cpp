// Gradient accumulation (Accelerate's GradientState): which micro-steps synchronize, the loss
// scaled by the micro-step count, and the optimizer's step, zero_grad and clipping only on the
// micro-step that synchronizes.
#include <torch/nn/utils/clip_grad.h>

#include "accelerator/state.h"
#include "ddp/error.h"

namespace ddp {

namespace detail {

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

}  // namespace detail

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

}  // namespace ddp
