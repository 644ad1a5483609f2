// Mixed precision for LibTorch, as Python's torch.autocast and torch.cuda.amp.GradScaler:
//
//   ddp::amp::GradScaler scaler;                       // init_scale 2^16, growth 2, backoff 0.5, interval 2000
//   for (auto& batch : *loader) {
//     optimizer.zero_grad();
//     at::Tensor loss;
//     {
//       ddp::amp::Autocast autocast(torch::kCUDA);      // fp16 on CUDA; torch::kCPU: bfloat16
//       loss = criterion(ddp_model->forward(batch.data), batch.target);
//     }                                                 // backward outside autocast, as in Python
//     scaler.scale(loss).backward();
//     scaler.step(optimizer);                           // skipped when a gradient is inf or NaN
//     scaler.update();
//   }
//
// Autocast state is per thread (LibTorch's), so a guard affects the thread that made it.
// GradScaler works on CUDA tensors (LibTorch's fused _amp_* kernels) and on CPU tensors (plain
// ATen ops with the same arithmetic). With DistributedDataParallel every rank unscales the same
// averaged gradients, so every rank makes the same skip decision; where gradients differ across
// ranks at step() (a ZeroRedundancyOptimizer's step, which is collective, or an optimizer whose
// gradients were not all-reduced: see GradScalerOptions::process_group), the found-inf flag is
// all-reduced (MAX) first, so that no rank steps while another skips.
//
// Not thread-safe: one GradScaler per training loop.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <unordered_map>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/process_group.h"

namespace ddp::amp {

struct AutocastOptions {
  std::optional<at::ScalarType>
      dtype;            // default: LibTorch's current autocast dtype for the device (fp16 on CUDA, bf16 on the CPU)
  bool enabled = true;  // false: a region without autocast inside an autocast region
  std::optional<bool> cache_enabled;  // cache of casted weights; default: LibTorch's current setting
};

// Python's `with torch.autocast(device_type, dtype=..., enabled=..., cache_enabled=...)`: while
// the guard lives, eligible ops on `device_type` (torch::kCUDA or torch::kCPU) run in `dtype`.
// The destructor restores the previous enabled flag, dtype and cache setting, and clears the cast
// cache when it leaves the outermost autocast region; an exception leaving the region restores
// them the same way. As in PyTorch, CUDA when no GPU is available logs a warning and makes the
// region one without autocast. Throws InvalidArgument for another device type, and for a CPU
// dtype the CPU cannot autocast to (LibTorch 1.13: bfloat16 only; 2.x: bfloat16 and float16).
class Autocast {
 public:
  explicit Autocast(c10::DeviceType device_type, AutocastOptions options = {});
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

  bool enabled() const { return enabled_; }  // whether this region autocasts
  at::ScalarType dtype() const { return dtype_; }

 private:
  c10::DeviceType device_type_;
  bool enabled_;
  at::ScalarType dtype_;
  bool previous_enabled_;
  at::ScalarType previous_dtype_;
  bool previous_cache_enabled_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1: the scale grows by this after growth_interval finite steps in a row
  double backoff_factor = 0.5;  // < 1: the scale shrinks by this after a step with an inf or NaN gradient
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() passes through, step() just steps, update() does nothing
  // The ranks whose skip decisions must agree when their gradients can differ at step() (gradients
  // not all-reduced: stepping under no_sync, local SGD). When set, the found-inf flag is
  // all-reduced (MAX) over it before every step, so every rank skips when any rank saw inf or NaN
  // (collective: every rank calls step() together). A ZeroRedundancyOptimizer's own group is
  // always used. Null: no all-reduce (DDP's averaged gradients already agree).
  std::shared_ptr<ProcessGroup> process_group;
};

// PyTorch's GradScaler (torch/cuda/amp/grad_scaler.py), for CPU and CUDA tensors.
class GradScaler {
 public:
  // Throws InvalidArgument unless growth_factor > 1 and backoff_factor < 1 (when enabled).
  explicit GradScaler(GradScalerOptions options = {});

  // `outputs` times the scale (which is created on the first call, on that tensor's device); the
  // unchanged tensor when disabled.
  at::Tensor scale(const at::Tensor& outputs);
  std::vector<at::Tensor> scale(const std::vector<at::Tensor>& outputs);

  // Divides the optimizer's gradients by the scale in place and records, per device, whether any
  // was inf or NaN. Optional: step() unscales when it was not called (call it to clip or inspect
  // unscaled gradients). Throws Error when called twice for one optimizer before update(), after
  // step(), before any scale(), or for float16 gradients (fp16 master weights are not supported,
  // as in PyTorch).
  void unscale_(torch::optim::Optimizer& optimizer);

  // Unscales (unless unscale_ was called), then runs optimizer.step() unless a gradient was inf
  // or NaN (agreed over a process group where gradients can differ: see GradScalerOptions).
  // Returns whether the optimizer stepped. Throws Error when called twice before update().
  bool step(torch::optim::Optimizer& optimizer);

  // Multiplies the scale by backoff_factor if any step since the last update saw inf or NaN, or
  // by growth_factor after growth_interval finite steps in a row (the counter then restarts; a
  // scale that would overflow float32 stays). `new_scale` sets the scale instead. Call once per
  // iteration, after step() for every optimizer. Throws Error when no step() or unscale_() ran.
  void update(std::optional<double> new_scale = std::nullopt);

  // The current scale (init_scale before the first scale()), 1 when disabled.
  double get_scale() const;
  // Finite steps in a row since the scale last changed.
  std::int64_t get_growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }
  void set_growth_factor(double factor) { options_.growth_factor = factor; }
  void set_backoff_factor(double factor) { options_.backoff_factor = factor; }
  void set_growth_interval(std::int64_t interval) { options_.growth_interval = interval; }

  // Python's state_dict keys: "scale", "growth_factor", "backoff_factor", "growth_interval",
  // "_growth_tracker" (nothing when disabled). Save after update(). Loading into a disabled
  // scaler does nothing; loading an empty archive into an enabled one throws Error.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    std::unordered_map<c10::Device, at::Tensor> found_inf_per_device;  // float32 [1], 1 where inf or NaN was seen
  };
  void check_scale_exists(const char* caller) const;
  void lazy_init(const c10::Device& device);

  GradScalerOptions options_;
  at::Tensor scale_;           // float32 [1], created by the first scale()
  at::Tensor growth_tracker_;  // int32 [1]
  double init_scale_;
  std::int64_t init_growth_tracker_ = 0;
  std::unordered_map<const torch::optim::Optimizer*, PerOptimizer> per_optimizer_;
};

namespace detail {

// The scale after one update, exactly as LibTorch's _amp_update_scale_ kernel computes it:
// found_inf: scale * backoff_factor (in double, rounded to float) and the tracker back to 0;
// otherwise the tracker counts the finite step, and when it reaches growth_interval the scale is
// multiplied by growth_factor (unless that overflows float32) and the tracker restarts. Pure.
struct ScaleState {
  float scale;
  std::int32_t growth_tracker;
  bool operator==(const ScaleState&) const = default;
};
ScaleState next_scale(ScaleState state, bool found_inf, double growth_factor, double backoff_factor,
                      std::int64_t growth_interval);

}  // namespace detail

}  // namespace ddp::amp
