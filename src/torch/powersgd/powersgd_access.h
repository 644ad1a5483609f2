// The PowerSGD hook's access to its state's internals (the state's public face is read-only).
#pragma once

#include "ddp/torch/powersgd.h"

namespace ddp::comm_hooks {

struct PowerSGDAccess {
  static std::mt19937& rng(PowerSGDState& s) { return s.rng_; }
  static std::map<std::size_t, at::Tensor>& error(PowerSGDState& s) { return s.error_; }
  static std::map<std::size_t, at::Tensor>& p(PowerSGDState& s) { return s.p_; }
  static std::map<std::size_t, at::Tensor>& q(PowerSGDState& s) { return s.q_; }
  static std::map<std::size_t, at::Tensor>& layout(PowerSGDState& s) { return s.layout_; }
  static std::int64_t& iter(PowerSGDState& s) { return s.iter_; }
  static std::int64_t& numel_before(PowerSGDState& s) { return s.numel_before_; }
  static std::int64_t& numel_after(PowerSGDState& s) { return s.numel_after_; }
};

}  // namespace ddp::comm_hooks
