// One bucket of the reducer: some parameters' gradients flattened in one tensor, and the
// communication that averages them. Each synchronized backward fills it (the gradients copied
// in, unless they already live in it), launches it (the comm hook, or the built-in sum) and
// writes the result back into .grad. Without a comm hook the average is taken while filling, with
// PyTorch's reducer's arithmetic (a hook gets the gradients as they are and averages itself, as in
// PyTorch). Autograd thread.
//
// Where the gradients live. With gradient_as_bucket_view (PyTorch's semantics) .grad always
// aliases the bucket. Without it (PyTorch's default, copy semantics) .grad aliases the bucket too
// wherever nobody could tell the difference, so that the default path copies neither in nor out
// once the first backward has run:
// - write_back gives .grad the bucket's memory instead of copying into it when nothing else holds
//   that .grad (its tensor and its storage referenced by the parameter alone, no autograd graph,
//   the parameter's dense contiguous layout); a .grad the user holds or assigned keeps its tensor,
//   which gets the result copied in, as in PyTorch;
// - fill moves the bucket to fresh memory before writing it when a tensor that used to be .grad
//   here (or a view of one) is still held elsewhere, after LibTorch 2.x's zero_grad set .grad to
//   none: what the user kept keeps its values, as in PyTorch.
// The average is taken with the copy's arithmetic either way (docs/DDP.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ddp/process_group.h"
#include "ddp/torch/comm_hooks.h"

namespace ddp::detail {

class Bucket {
 public:
  // A zeroed flat tensor for `members` (indices into `params`, all of one dtype and device, in
  // bucket order), bucket `index` of the launch order. With `as_view` (gradient_as_bucket_view)
  // the members' .grad become aliases of it at once, a defined gradient copied in first.
  Bucket(std::size_t index, bool is_last, std::vector<std::size_t> members, const std::vector<at::Tensor>& params,
         std::shared_ptr<ProcessGroup> group, bool as_view);

  const std::vector<std::size_t>& members() const { return members_; }
  std::int64_t bytes() const;

  // Copies the members' gradients in; a member this rank did not use in this iteration
  // (`used[p] == 0`, p a parameter index) or without a gradient contributes zeros (a stale .grad
  // must not leak in). `divisor` > 0: each gradient is multiplied by 1 / divisor on the way (the
  // world size, or under a join the ranks still training), a gradient that already is a view of
  // the bucket divided in place (PyTorch's reducer's arithmetic, to the bit); 0: copied as it is.
  // Where the all-reduce can average itself (averages_in_reduction) the gradients are copied as
  // they are and launch all-reduces with AVG: one pass over them fewer.
  void fill(const std::vector<std::uint8_t>& used, int divisor);

  // Starts the communication of the filled bucket: `hook`, or with none the sum (or the average,
  // see fill) over the group in place. Throws Error naming the bucket when the hook returns no Future.
  void launch(const CommHook& hook);
  // The launched communication's Future (null before launch and after write_back).
  const std::shared_ptr<Future>& future() const { return future_; }

  // Waits for the launched communication and writes its result into the members' .grad.
  // `globally_used` (empty: every member) marks the parameters some rank used: one used on no
  // rank keeps an undefined .grad, as in PyTorch. Rethrows the communication's error with the
  // bucket's index in front.
  void write_back(const std::vector<std::uint8_t>& globally_used);
  // Waits for a launched communication ignoring its error (before an error is thrown, or at
  // teardown), then forgets it.
  void settle();
  // Forgets a launched communication without waiting for it (its Work keeps its tensors alive).
  void forget() { future_.reset(); }

 private:
  // What .grad points to with gradient_as_bucket_view: the view's memory, as a tensor autograd does
  // not know as a view (LibTorch 1.x's Optimizer::zero_grad calls detach_(), refused on views).
  at::Tensor alias(std::size_t k) const;
  bool averages_in_reduction(int divisor) const;
  // Copy semantics: whether a tensor that once was member k's .grad is held outside .grad; the
  // alias member k's .grad gets (made once, kept while nothing else holds it); whether `grad` can
  // become that alias unseen.
  bool stale_alias_held() const;
  const at::Tensor& shared_alias(std::size_t k);
  bool replaceable(const at::Tensor& grad, std::size_t k) const;
  // Fresh zeroed memory for the bucket; the old stays with whatever holds it.
  void move_memory();

  std::vector<std::size_t> members_;
  std::vector<at::Tensor> params_;  // members_' parameters (handles: .grad is theirs)
  std::shared_ptr<ProcessGroup> group_;
  at::Tensor flat_;
  std::vector<at::Tensor> views_;       // per member, shaped like it, into flat_
  std::vector<at::Tensor> aliases_;     // copy semantics: per member, the alias .grad last got (or none)
  GradBucket handed_;                   // what the hook gets; alive as long as its Future may run
  ReduceOp reduce_op_ = ReduceOp::SUM;  // of the built-in all-reduce, set by fill
  int divisor_ = 0;                     // of reciprocal_
  at::Tensor reciprocal_;               // 1 / divisor_ as a wrapped scalar, as PyTorch's reducer multiplies by it
  bool as_view_;
  std::shared_ptr<Future> future_;
};

}  // namespace ddp::detail
