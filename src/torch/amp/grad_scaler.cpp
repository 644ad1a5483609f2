// ddp::amp::GradScaler: torch/cuda/amp/grad_scaler.py, for CPU and CUDA tensors.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>

#include "amp/unscale.h"
#include "ddp/error.h"
#include "ddp/torch/amp.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/zero_redundancy_optimizer.h"
#include "util/strings.h"

namespace ddp::amp {

using ddp::detail::cat;

namespace detail {

ScaleState next_scale(ScaleState state, bool found_inf, double growth_factor, double backoff_factor,
                      std::int64_t growth_interval) {
  if (found_inf) return {static_cast<float>(static_cast<double>(state.scale) * backoff_factor), 0};
  // A successful step: the tracker counts it before the comparison.
  const std::int32_t successful = state.growth_tracker + 1;
  if (successful != growth_interval) return {state.scale, successful};
  const auto grown = static_cast<float>(static_cast<double>(state.scale) * growth_factor);
  return {std::isfinite(grown) ? grown : state.scale, 0};  // never past float32's range
}

}  // namespace detail

namespace {

// The ranks that must agree on skipping: a sharded optimizer's (its step is collective), else
// the scaler's option.
std::shared_ptr<ProcessGroup> agreement_group(const torch::optim::Optimizer& optimizer,
                                              const GradScalerOptions& options) {
  if (const auto* zero = dynamic_cast<const ddp::detail::ZeroBase*>(&optimizer)) return zero->process_group();
  return options.process_group;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(std::move(options)), init_scale_(options_.init_scale) {
  if (!options_.enabled) return;
  if (!(options_.growth_factor > 1.0)) {
    throw InvalidArgument(cat("GradScaler: growth_factor must be > 1, got ", options_.growth_factor));
  }
  if (!(options_.backoff_factor < 1.0)) {
    throw InvalidArgument(cat("GradScaler: backoff_factor must be < 1, got ", options_.backoff_factor));
  }
}

void GradScaler::lazy_init(const c10::Device& device) {
  const auto on = torch::TensorOptions().device(device);
  scale_ = torch::full({1}, init_scale_, on.dtype(at::kFloat));
  growth_tracker_ = torch::full({1}, init_growth_tracker_, on.dtype(at::kInt));
}

void GradScaler::check_scale_exists(const char* caller) const {
  if (!scale_.defined()) {
    throw Error(cat("GradScaler::", caller,
                    ": there is no scale yet; this may indicate that the script did not use "
                    "scaler.scale(loss) earlier in the iteration"));
  }
}

at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!options_.enabled) return outputs;
  if (!scale_.defined()) lazy_init(outputs.device());
  return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

std::vector<at::Tensor> GradScaler::scale(const std::vector<at::Tensor>& outputs) {
  if (!options_.enabled) return outputs;
  std::vector<at::Tensor> scaled;
  std::unordered_map<c10::Device, at::Tensor> per_device;  // one copy of the scale per device
  for (const auto& t : outputs) {
    if (!scale_.defined()) lazy_init(t.device());
    auto it = per_device.find(t.device());
    if (it == per_device.end()) it = per_device.emplace(t.device(), scale_.to(t.device(), true, true)).first;
    scaled.push_back(t * it->second);
  }
  return scaled;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_scale_exists("unscale_");
  auto& state = per_optimizer_[&optimizer];
  if (state.stage == Stage::Unscaled) {
    throw Error(
        "GradScaler::unscale_: unscale_() has already been called on this optimizer since the last update(); "
        "call it at most once per optimizer and iteration (step() unscales only when it was not called)");
  }
  if (state.stage == Stage::Stepped) {
    throw Error("GradScaler::unscale_: unscale_() is being called after step(); unscale before step(), then update()");
  }
  // The reciprocal in double: float32 division can be imprecise under some compile options (PyTorch's note).
  const auto inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  state.found_inf_per_device = detail::unscale_gradients(optimizer.param_groups(), inv_scale, /*allow_fp16=*/false);
  state.stage = Stage::Unscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_scale_exists("step");
  if (per_optimizer_[&optimizer].stage == Stage::Stepped) {
    throw Error(
        "GradScaler::step: step() has already been called since the last update(); call update() once per "
        "iteration, after step()");
  }
  if (const auto* zero = dynamic_cast<const ddp::detail::ZeroBase*>(&optimizer); zero && zero->in_join()) {
    // The ranks that have joined step the optimizer in its join hook, without this scaler's
    // found-inf all-reduce and unscaling: they would wait in different collectives.
    throw InvalidArgument(
        "GradScaler::step: a ZeroRedundancyOptimizer cannot be stepped through a GradScaler inside "
        "ddp::join (the ranks that have run out of inputs step it without the scaler). Train with "
        "even inputs (DistributedSampler's default), or leave the scaler out of the joined loop "
        "(bfloat16 autocast needs none)");
  }
  if (per_optimizer_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  auto& state = per_optimizer_[&optimizer];
  if (state.found_inf_per_device.empty()) {
    throw Error(
        "GradScaler::step: no inf checks were recorded for this optimizer: none of its parameters has a "
        "gradient; run backward on scaler.scale(loss) before step()");
  }
  auto found = torch::zeros({1}, scale_.options());
  for (const auto& [device, flag] : state.found_inf_per_device) found.add_(flag.to(scale_.device()));
  if (const auto group = agreement_group(optimizer, options_); group && group->size() > 1) {
    ddp::all_reduce(found, ReduceOp::MAX, group);
    // update() reads the agreed flag, so that the scales stay equal across the ranks too.
    state.found_inf_per_device = {{scale_.device(), found}};
  }
  const bool finite = found.item<float>() == 0.0f;
  if (finite) optimizer.step();
  state.stage = Stage::Stepped;
  return finite;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  check_scale_exists("update");
  if (new_scale) {
    scale_.fill_(*new_scale);
  } else {
    std::vector<at::Tensor> found_infs;
    for (const auto& [optimizer, state] : per_optimizer_) {
      for (const auto& [device, flag] : state.found_inf_per_device) found_infs.push_back(flag.to(scale_.device()));
    }
    if (found_infs.empty()) {
      throw Error(
          "GradScaler::update: no inf checks were recorded prior to update(); call step(optimizer) (or "
          "unscale_(optimizer)) first");
    }
    auto combined = found_infs[0].clone();
    for (std::size_t i = 1; i < found_infs.size(); ++i) combined.add_(found_infs[i]);
    if (scale_.is_cuda()) {
      at::_amp_update_scale_(scale_, growth_tracker_, combined, options_.growth_factor, options_.backoff_factor,
                             options_.growth_interval);
    } else {
      const auto next = detail::next_scale({scale_.item<float>(), growth_tracker_.item<std::int32_t>()},
                                           combined.item<float>() != 0.0f, options_.growth_factor,
                                           options_.backoff_factor, options_.growth_interval);
      scale_.fill_(next.scale);
      growth_tracker_.fill_(next.growth_tracker);
    }
  }
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<float>() : init_scale_;
}

std::int64_t GradScaler::get_growth_tracker() const {
  if (!options_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<std::int32_t>() : init_growth_tracker_;
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  if (!options_.enabled) return;
  archive.write("scale", c10::IValue(get_scale()));
  archive.write("growth_factor", c10::IValue(options_.growth_factor));
  archive.write("backoff_factor", c10::IValue(options_.backoff_factor));
  archive.write("growth_interval", c10::IValue(options_.growth_interval));
  archive.write("_growth_tracker", c10::IValue(get_growth_tracker()));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  if (!options_.enabled) return;
  auto read = [&](const char* key, bool integer) {
    c10::IValue value;
    if (!archive.try_read(key, value)) {
      throw Error(cat("GradScaler::load: the archive has no '", key,
                      "'; it holds no GradScaler state, possibly because "
                      "it was saved from a disabled GradScaler"));
    }
    if (integer ? !value.isInt() : !value.isDouble()) {
      throw Error(
          cat("GradScaler::load: '", key, "' is a ", value.tagKind(), ", not ", integer ? "an integer" : "a float"));
    }
    return value;
  };
  const double scale = read("scale", false).toDouble();
  const double growth_factor = read("growth_factor", false).toDouble();
  const double backoff_factor = read("backoff_factor", false).toDouble();
  const std::int64_t growth_interval = read("growth_interval", true).toInt();
  const std::int64_t tracker = read("_growth_tracker", true).toInt();
  init_scale_ = scale;
  if (scale_.defined()) scale_.fill_(scale);
  options_.growth_factor = growth_factor;
  options_.backoff_factor = backoff_factor;
  options_.growth_interval = growth_interval;
  init_growth_tracker_ = tracker;
  if (growth_tracker_.defined()) growth_tracker_.fill_(tracker);
}

}  // namespace ddp::amp
