#include "reducer/bucket.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>

#include "compat/torch_compat.h"
#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "util/error_kind.h"
#include "util/log.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& params, const std::vector<std::size_t>& members) {
  std::vector<at::Tensor> picked;
  for (std::size_t p : members) picked.push_back(params[p]);
  return picked;
}

// Zeros for the bucket; on the CPU in memory the host's peers read where it is, when the group
// has such memory (the all-reduce then copies nothing through the shared segment).
at::Tensor flat_for(const std::vector<at::Tensor>& params, ProcessGroup& group) {
  std::int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  const auto options = params.front().options().requires_grad(false);
  const auto bytes = static_cast<std::size_t>(total) * params.front().element_size();
  if (bytes > 0 && params.front().is_cpu()) {
    std::shared_ptr<void> memory;
    try {
      memory = group.allocate_shared_memory(bytes);
    } catch (const IOError& e) {  // out of descriptors or memory: ordinary memory still does
      log(LogLevel::Warn, "DistributedDataParallel: a bucket of ", bytes, " bytes stays in ordinary memory (", e.what(),
          "); its all-reduce copies through the shared segment");
    }
    if (memory) {
      void* data = memory.get();
      return at::from_blob(
          data, {total}, [memory = std::move(memory)](void*) {}, options);  // zeroed already
    }
  }
  return at::zeros({total}, options);
}

std::vector<at::Tensor> views_of(const at::Tensor& flat, const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> views;
  std::int64_t offset = 0;
  for (const auto& p : params) {
    views.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  return views;
}

}  // namespace

Bucket::Bucket(std::size_t index, bool is_last, std::vector<std::size_t> members, const std::vector<at::Tensor>& params,
               std::shared_ptr<ProcessGroup> group, bool as_view)
    : members_(std::move(members)),
      params_(pick(params, members_)),
      group_(std::move(group)),
      flat_(flat_for(params_, *group_)),
      views_(views_of(flat_, params_)),
      aliases_(members_.size()),
      handed_(index, is_last, flat_, params_, group_),
      as_view_(as_view) {
  if (!as_view_) return;
  at::NoGradGuard no_grad;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    at::Tensor& grad = params_[k].mutable_grad();
    if (grad.defined()) views_[k].copy_(grad);
    grad = alias(k);
  }
}

std::int64_t Bucket::bytes() const { return flat_.numel() * flat_.element_size(); }

at::Tensor Bucket::alias(std::size_t k) const {
  const at::Tensor& view = views_[k];
  return at::from_blob(
      view.data_ptr(), view.sizes(), [keep = flat_](void*) {}, view.options());
}

bool Bucket::stale_alias_held() const {
  for (std::size_t k = 0; k < aliases_.size(); ++k) {
    const at::Tensor& kept = aliases_[k];
    if (!kept.defined() || kept.is_same(params_[k].grad())) continue;
    if (kept.use_count() > 1 || kept.storage().use_count() > 1) return true;  // a tensor or a view of it
  }
  return false;
}

const at::Tensor& Bucket::shared_alias(std::size_t k) {
  if (!aliases_[k].defined()) aliases_[k] = alias(k);
  return aliases_[k];
}

// Nothing but the parameter sees `grad`: replacing it by an alias holding the same values cannot
// be told apart, short of comparing data pointers (which LibTorch 2.x's zero_grad changes anyway).
bool Bucket::replaceable(const at::Tensor& grad, std::size_t k) const {
  const at::Tensor& param = params_[k];
  return grad.use_count() == 1 && grad.storage().use_count() == 1 && !grad.requires_grad() && grad.is_contiguous() &&
         param.is_contiguous() && grad.layout() == at::kStrided && grad.scalar_type() == flat_.scalar_type() &&
         grad.device() == flat_.device() && grad.sizes() == param.sizes();
}

void Bucket::move_memory() {
  flat_ = flat_for(params_, *group_);
  views_ = views_of(flat_, params_);
  for (auto& kept : aliases_) kept = at::Tensor();
  handed_ = GradBucket(handed_.index(), handed_.is_last(), flat_, params_, group_);
}

// Whether the average over `divisor` ranks can be the all-reduce's own (AVG): the group's size, a
// power of two, float32 or float64 on the CPU. Then the sum is scaled by 1 / divisor once, in the
// reduction's own pass, instead of every gradient before it: the same bits, since scaling by a
// power of two commutes with rounding (short of results below 2^-126 or beyond the type's range).
bool Bucket::averages_in_reduction(int divisor) const {
  const auto type = flat_.scalar_type();
  return divisor > 1 && divisor == handed_.process_group()->size() && (divisor & (divisor - 1)) == 0 &&
         flat_.is_cpu() && (type == at::kFloat || type == at::kDouble);
}

void Bucket::fill(const std::vector<std::uint8_t>& used, int divisor) {
  at::NoGradGuard no_grad;
  reduce_op_ = averages_in_reduction(divisor) ? ReduceOp::AVG : ReduceOp::SUM;
  if (reduce_op_ == ReduceOp::AVG) divisor = 0;
  const bool average = divisor > 0;
  if (average && divisor != divisor_) {
    reciprocal_ = at::native::wrapped_scalar_tensor(1.0 / divisor);
    divisor_ = divisor;
  }
  if (!as_view_ && stale_alias_held()) move_memory();
  // On a GPU each kernel launch costs the host microseconds, about as much as copying a small
  // gradient: the copies in, the zeros of unused gradients and the averaging go as a few
  // multi-tensor kernels for the bucket, not one per gradient. There both div_ by a scalar and
  // mul_out compute x * float(1 / divisor), so one _foreach_mul_ is PyTorch's arithmetic to the
  // bit. On the CPU the average is taken in the copy's own pass (mul_out) or in place as PyTorch
  // does; plain copies and zeros are batched there too (one by one inside, the same bytes).
  const bool gpu = flat_.is_cuda();
  std::vector<at::Tensor> to, from, scaled, zeroed;  // batched: copied in from `from`; multiplied; zeroed
  for (std::size_t k = 0; k < params_.size(); ++k) {
    at::Tensor& grad = params_[k].mutable_grad();
    at::Tensor& view = views_[k];
    if (!used[members_[k]] || !grad.defined()) {
      zeroed.push_back(view);
      continue;
    }
    if (grad.data_ptr() == view.data_ptr()) {  // lives in the bucket already
      if (!average) continue;
      if (gpu) {
        scaled.push_back(view);
      } else if (as_view_) {
        view.div_(divisor);  // PyTorch's arithmetic for its bucket views
      } else {
        view.mul_(reciprocal_);  // the copy's (mul_out below), to the bit
      }
      continue;
    }
    if (gpu || !average) {
      to.push_back(view);
      from.push_back(grad);  // kept alive until copied, whatever .grad becomes next
      if (average) scaled.push_back(view);
    } else {
      at::mul_out(view, grad, reciprocal_);  // one pass over the gradient less than copy, then divide
    }
    if (as_view_) grad = alias(k);
  }
  if (!zeroed.empty()) at::_foreach_zero_(zeroed);
  if (!to.empty()) compat::copy_all(to, from);
  if (!scaled.empty()) at::_foreach_mul_(scaled, 1.0 / divisor);
}

void Bucket::launch(const CommHook& hook) {
  future_ = hook ? hook(handed_)
                 : std::make_shared<Future>(all_reduce_async(flat_, reduce_op_, handed_.process_group()), flat_);
  if (!future_)
    throw Error(cat("DistributedDataParallel: the comm hook returned no future for bucket ", handed_.index()));
}

void Bucket::write_back(const std::vector<std::uint8_t>& globally_used) {
  at::NoGradGuard no_grad;  // also for the hook's continuation
  at::Tensor result;
  try {
    result = future_->wait();
  } catch (const Error&) {
    rethrow_with_context(
        cat("DistributedDataParallel: the gradient all-reduce of bucket ", handed_.index(), " failed"));
  }
  future_.reset();
  if (result.data_ptr() != flat_.data_ptr()) flat_.copy_(result.view({-1}));
  for (std::size_t k = 0; k < params_.size(); ++k) {
    at::Tensor& grad = params_[k].mutable_grad();
    const bool used_nowhere = !globally_used.empty() && !globally_used[members_[k]];
    if (used_nowhere && !grad.defined()) continue;  // as in PyTorch: no gradient at all
    if (as_view_) {
      if (!grad.defined() || grad.data_ptr() != views_[k].data_ptr()) grad = alias(k);
    } else if (grad.defined() && grad.is_same(aliases_[k])) {
      continue;  // lives in the bucket already
    } else if (!grad.defined() || replaceable(grad, k)) {
      grad = shared_alias(k);
    } else {
      grad.copy_(views_[k]);  // a .grad someone holds: its tensor keeps being .grad
    }
  }
}

void Bucket::settle() {
  if (!future_) return;
  try {
    future_->work()->wait();
  } catch (...) {
  }
  future_.reset();
}

}  // namespace ddp::detail
