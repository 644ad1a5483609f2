// The reducer: DDP's per-iteration gradient averaging. A hook on each parameter's gradient
// accumulator (autograd thread) counts its arrival (arrivals.h) and, once complete, marks it ready
// (readiness.h); a bucket whose members are all ready is filled and launched at once, in bucket
// order (bucket.h), while backward goes on; a callback queued on the autograd engine runs at the
// end of backward, waits for every bucket and writes the averaged gradients back. After the first
// synchronized backward the buckets are rebuilt once in the order gradients really arrived
// (bucket_plan.h); with static_graph that backward also learns how often each gradient arrives,
// and launches every bucket at its end. Under a join (ddp/torch/join.h) the average may be over
// the ranks still training, and a rank that has joined runs shadow backward passes.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compat/torch_compat.h"

#include "ddp/torch/comm_hooks.h"
#include "ddp/torch/distributed_data_parallel.h"
#include "ddp/torch/join.h"
#include "reducer/arrivals.h"
#include "reducer/bucket.h"
#include "reducer/bucket_plan.h"
#include "reducer/readiness.h"
#include "reducer/step_clock.h"
#include "reducer/timeline.h"

namespace torch::autograd {
struct Node;
}

namespace ddp::detail {

class Reducer {
 public:
  // Plans the buckets for `params` (named `names` in errors) and hooks their gradient
  // accumulators. Uses options.bucket_cap_mb, find_unused_parameters, static_graph and
  // gradient_as_bucket_view. `timeline` (may be null) and `clock` outlive the reducer; `clock`
  // learns when each backward ends.
  Reducer(std::shared_ptr<ProcessGroup> group, std::vector<at::Tensor> params, std::vector<std::string> names,
          const DDPOptions& options, Timeline* timeline, StepClock& clock);
  // Waits for launched communication; the hooks left on the parameters become inert.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each forward: `join` is the running join (null outside one), which the backward of
  // this iteration consults (the divisor, the rebuild's root); a backward that failed half-way
  // is wound up; the accumulator of a parameter whose data was replaced since (Module::load,
  // set_ can give it a new one, which would accumulate without telling us) is hooked.
  void before_forward(JoinContext* join);
  // After each forward (find_unused_parameters): the parameters `outputs` do not reach will be
  // marked ready at the start of backward. No outputs: found at the end of backward instead.
  void after_forward(const std::vector<at::Tensor>& outputs);

  // A rank that has joined: the collectives of one synchronized backward of the ranks still
  // training, with zeros for this rank's gradients (through the comm hook), leaving their average
  // in .grad.
  void shadow_backward(JoinContext& join);

  void set_no_sync(bool on) { no_sync_ = on; }
  bool no_sync() const { return no_sync_; }
  // Throws InvalidArgument for an empty hook, Error when one is registered or a backward has run.
  void register_comm_hook(CommHook hook);
  BucketPlan bucket_plan() const;

 private:
  void build_buckets(const BucketPlan& plan);
  void refresh_hooks();
  void on_gradient(std::size_t param);
  void begin_backward();
  void start_iteration();
  // Under no_sync: the end of this local backward is queued, for the step clock.
  void begin_local_backward();
  void mark_ready(std::size_t param);
  void launch(std::size_t bucket);
  // `shadow`: a joined rank's shadow backward, in which no gradient arrives.
  void finalize(bool shadow = false);
  [[noreturn]] void fail(const std::string& message);
  std::string describe(const std::vector<std::size_t>& params) const;
  std::string describe_arrivals(const std::vector<std::size_t>& params) const;
  std::vector<std::uint8_t> globally_used();
  std::vector<std::uint8_t> all_reduce_used();
  void write_back(const std::vector<std::uint8_t>& globally_used);
  void rebuild_buckets();
  void settle_launched();
  int divisor();
  int rebuild_root();
  // A group of one without a comm hook: the average of one gradient is itself.
  bool skip_communication() const { return world_ == 1 && !hook_; }
  std::size_t cap() const;
  std::size_t first_cap() const;

  using Clock = std::chrono::steady_clock;
  std::shared_ptr<ProcessGroup> group_;
  // Where no two ranks share a host (CPU parameters): a twin of group_ (ProcessGroup::twin) that
  // runs every odd bucket's communication, so that two buckets are in flight. Null elsewhere.
  std::shared_ptr<ProcessGroup> odd_bucket_twin_;
  int world_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  const DDPOptions options_;
  Timeline* timeline_;
  StepClock& clock_;
  std::vector<ParamSpec> specs_;
  std::vector<compat::GradAccumulator> accumulators_;  // the ones hooked, per parameter
  std::vector<Bucket> buckets_;
  std::unique_ptr<Readiness> readiness_;
  Arrivals arrivals_;
  std::vector<std::uint8_t> used_;         // this iteration: gradients that really arrived
  std::vector<std::size_t> unreached_;     // found unused by the forward's graph
  std::vector<std::uint8_t> static_used_;  // static_graph: used on some rank, learned in the first backward
  CommHook hook_;
  std::shared_ptr<std::atomic<Reducer*>> self_;  // what the hooks call, cleared on destruction
  JoinContext* join_ = nullptr;                  // the running join, for this iteration
  int divisor_ = 0;                              // this iteration's, once known
  Clock::time_point backward_start_;
  bool in_backward_ = false;
  bool in_local_backward_ = false;  // a backward under no_sync
  bool no_sync_ = false;
  bool synced_once_ = false;
};

}  // namespace ddp::detail
