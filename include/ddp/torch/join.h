// ddp::join: training with uneven inputs (PyTorch's torch.distributed.algorithms.Join).
//
//   ddp::DistributedDataParallel ddp_model(net);
//   ddp::join({&ddp_model}, [&] {                 // the joinables, then the training loop
//     for (auto& batch : *loader) {               // ranks may have different numbers of batches
//       optimizer.zero_grad();
//       loss_fn(ddp_model->forward(batch.data), batch.target).backward();
//       optimizer.step();
//     }
//   });                                           // every rank returns here, none hangs
//
// Without a join, a rank that runs out of inputs leaves its peers waiting in a collective it
// will never call (they fail at the group's timeout). Inside one, every iteration starts with an
// announcement (one small all-reduce, made by the first joinable): the ranks still training say
// so. A rank whose loop has ended keeps answering: it runs its joinables' hooks once per
// iteration of the others, which issue the same collectives with nothing to contribute (DDP: the
// buffer broadcast, each gradient bucket's all-reduce with zeros, through the registered comm
// hook, the unused-parameter map, the bucket rebuild), until every rank has joined. Then each
// joinable's post hook runs (DDP: the last rank to join broadcasts its parameters and buffers, so
// every model ends equal). SyncBatchNorm layers need not be listed: while some ranks have joined,
// the ranks still training exchange their statistics among themselves (ddp/torch/sync_batch_norm.h).
//
// Options as PyTorch's: `enable` (false: the loop runs as it is, without announcements), and
// `throw_on_early_termination` (once a rank runs out, every rank throws ddp::Error at the same
// iteration, naming the rank(s) that ran out first; catch it on every rank). DDP's
// `divide_by_initial_world_size`: gradients are averaged over the initial world size (true: every
// sample weighs the same) or over the ranks still training (false).
//
// An exception out of the loop propagates at once, without the shadow iterations (as PyTorch's
// context manager does); the other ranks then fail at the group's timeout, naming this one.
// Every rank must call join with the same joinables' kinds and order and the same options.
// One join at a time per process; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <concepts>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/process_group.h"

namespace ddp {

struct JoinOptions {
  bool enable = true;                        // false: run the loop without join's collectives
  bool throw_on_early_termination = false;   // every rank throws when the first rank runs out
  bool divide_by_initial_world_size = true;  // DDP: average over the initial world size, else over those training
};

// What the first joinable tells the shadows of one iteration, besides "I still train".
struct JoinIteration {
  bool broadcasts_buffers = false;  // DDP: broadcasts its buffers before this forward
  bool syncs_gradients = false;     // DDP: the backward that follows synchronizes gradients
};

// The running join, as joinables and their hooks see it. Lives as long as the join.
class JoinContext {
 public:
  virtual ~JoinContext() = default;
  virtual const JoinOptions& options() const = 0;
  virtual const std::shared_ptr<ProcessGroup>& process_group() const = 0;
  // This iteration's announcement (waits for it): the group ranks still training, ascending, and
  // what they do in it. Thread-safe (DDP reads it on the autograd thread).
  virtual std::vector<int> training_ranks() = 0;
  virtual JoinIteration iteration() = 0;
  // The ranks that trained in the join's last iteration (the last to join); all ranks if no
  // iteration ran. Known once every rank has joined, for the post hooks.
  virtual std::vector<int> last_joiners() const = 0;
};

// A joinable's part in a join (PyTorch's JoinHook).
class JoinHook {
 public:
  virtual ~JoinHook() = default;
  // Once per iteration of the ranks still training, on a rank that has run out of inputs: issue
  // the collectives that this joinable issues in one training iteration, in the same order and on
  // the same groups, contributing nothing (zeros, a count of 0). The context says what the
  // iteration does (JoinIteration). It runs after the announcement, and after the hooks of the
  // joinables before this one in the join's list. The results may be kept where the training
  // ranks keep theirs (DDP leaves the averaged gradients in .grad, so that an optimizer's hook
  // after it, a ZeroRedundancyOptimizer's, can step its shard as the training ranks do).
  virtual void main_hook() {}
  // Once, on every rank, after every rank has joined: make the ranks' states agree (DDP: the
  // highest rank among the last to join broadcasts parameters and buffers). `is_last_joiner`:
  // this rank trained in the last iteration.
  virtual void post_hook(bool is_last_joiner) {}
};

namespace detail {
class JoinRun;
}

// Something that takes part in a join (PyTorch's Joinable): DistributedDataParallel, and any
// class whose per-iteration collectives must be shadowed by ranks that have run out of inputs.
class Joinable {
 public:
  virtual ~Joinable() = default;
  // The hook that shadows this joinable's collectives; `context` outlives it.
  virtual std::unique_ptr<JoinHook> join_hook(JoinContext& context) = 0;
  // Where the join's own collectives (the announcement) run, and on which group: every joinable
  // of one join must have the same group.
  virtual at::Device join_device() const = 0;
  virtual std::shared_ptr<ProcessGroup> join_process_group() const = 0;

 protected:
  // Call at the start of each iteration, before this joinable's first collective of it. Returns
  // the running join (null outside one, or when it is disabled). If this is the join's first
  // joinable, it announces here that this rank still trains, with `iteration` for the shadows;
  // with throw_on_early_termination it throws ddp::Error when a rank has run out. The first
  // joinable must be the one whose collectives come first in an iteration (the DDP model).
  // While this rank shadows the others (its join hooks run), nothing is announced: the rank no
  // longer trains, and the hook may call the code that notifies (a ZeroRedundancyOptimizer's
  // hook calls its step()).
  JoinContext* notify_join_context(const JoinIteration& iteration = {});
  // The running join this joinable takes part in (null outside one, or when it is disabled),
  // without announcing anything.
  JoinContext* join_context() const { return join_context_; }

 private:
  friend class detail::JoinRun;
  JoinContext* join_context_ = nullptr;
  bool first_joinable_ = false;
};

// A joinable as join() takes it: a Joinable (reference or pointer) or a module holder of one
// (`&ddp_model` or `ddp_model`).
class JoinableRef {
 public:
  JoinableRef(Joinable& joinable) : joinable_(&joinable) {}
  JoinableRef(Joinable* joinable) : joinable_(joinable) {}
  template <typename Holder>
  requires std::derived_from<typename Holder::ContainedType, Joinable> JoinableRef(Holder* holder)
      : joinable_(holder ? holder->get() : nullptr) {}
  template <typename Holder>
  requires std::derived_from<typename Holder::ContainedType, Joinable> JoinableRef(Holder& holder)
      : joinable_(holder.get()) {}
  Joinable* get() const { return joinable_; }

 private:
  Joinable* joinable_;
};

// Runs `loop` inside a join over `joinables` (at least one; their hooks run in this order), then,
// once this rank's loop has returned, shadows the ranks still training until all have joined,
// then runs the post hooks. Collective over the joinables' group. Throws InvalidArgument for no
// joinables, a null one, joinables on different groups, or a join already running; ddp::Error
// with throw_on_early_termination; the group's errors; and whatever `loop` throws.
void join(const std::vector<JoinableRef>& joinables, const std::function<void()>& loop, JoinOptions options = {});

}  // namespace ddp
