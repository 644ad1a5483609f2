// The state an Accelerator and the handles its prepare() returns share (ddp/torch/accelerator.h):
// what was prepared, the device and group, and the micro-step bookkeeping of gradient accumulation.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "accelerator/settings.h"
#include "ddp/torch/accelerator.h"

namespace ddp::detail {

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

}  // namespace ddp::detail
