#include "reducer/reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>

#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "reducer/ddp_variables.h"
#include "reducer/unused_parameters.h"
#include "shape_text.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr std::size_t kFirstBucketBytes = std::size_t{1} << 20;
constexpr std::size_t kListed = 5;  // parameters named in one error

// Sizes and (dtype, device) groups: what the bucket plan needs to know of the parameters.
std::vector<ParamSpec> specs_of(const std::vector<at::Tensor>& params) {
  std::vector<std::pair<int, int>> groups;
  std::vector<ParamSpec> specs;
  for (const auto& p : params) {
    const std::pair<int, int> key{static_cast<int>(p.scalar_type()), p.is_cuda() ? p.get_device() : -1};
    auto it = std::find(groups.begin(), groups.end(), key);
    if (it == groups.end()) it = groups.insert(groups.end(), key);
    specs.push_back({static_cast<std::size_t>(p.numel()) * p.element_size(), static_cast<int>(it - groups.begin())});
  }
  return specs;
}

std::string times(int n) { return cat(n, n == 1 ? " time" : " times"); }

// Two buckets in flight: where no two ranks share a host, one ring's steps leave each host's cores
// and link idle between messages, which a second ring fills (PyTorch's gloo group runs two
// buckets at once on two threads). On one host, rings at once would share the same cores and
// memory, and the shared-memory path is already at memcpy's speed; NCCL has streams of its own.
// The twin (ProcessGroup::twin) that carries the odd buckets, or null where one group serves:
// DDP_BUCKET_STREAMS=1 on any rank keeps every bucket on `group` (all ranks make the twin or none).
std::shared_ptr<ProcessGroup> odd_bucket_twin(const std::shared_ptr<ProcessGroup>& group,
                                              const std::vector<at::Tensor>& params) {
  const bool on_cpu = std::all_of(params.begin(), params.end(), [](const at::Tensor& p) { return p.is_cpu(); });
  if (group->size() < 2 || group->hosts() != group->size() || !on_cpu) return nullptr;
  VariableProblems ignored;  // DDP's constructor reports them
  const int mine = read_variables(kDdpVariables, with_overrides(group->variables()), ignored).bucket_streams;
  at::Tensor in_flight = at::full({1}, mine, at::kInt);  // buckets at once
  all_reduce(in_flight, ReduceOp::MIN, group);
  return in_flight.item<int>() > 1 ? group->twin() : nullptr;
}

}  // namespace

Reducer::Reducer(std::shared_ptr<ProcessGroup> group, std::vector<at::Tensor> params, std::vector<std::string> names,
                 const DDPOptions& options, Timeline* timeline, StepClock& clock)
    : group_(std::move(group)),
      world_(group_->size()),
      params_(std::move(params)),
      names_(std::move(names)),
      options_(options),
      timeline_(timeline),
      clock_(clock),
      specs_(specs_of(params_)),
      accumulators_(params_.size()),
      arrivals_(params_.size(), options_.static_graph),
      used_(params_.size(), 0),
      self_(std::make_shared<std::atomic<Reducer*>>(this)) {
  odd_bucket_twin_ = odd_bucket_twin(group_, params_);
  build_buckets(plan_buckets(specs_, reverse_order(params_.size()), first_cap(), cap()));
  refresh_hooks();
}

Reducer::~Reducer() {
  self_->store(nullptr);  // hooks outlive us on the parameters: make them inert
  settle_launched();
}

std::size_t Reducer::cap() const { return static_cast<std::size_t>(options_.bucket_cap_mb * 1024 * 1024); }
std::size_t Reducer::first_cap() const { return std::min(kFirstBucketBytes, cap()); }

void Reducer::build_buckets(const BucketPlan& plan) {
  std::vector<Bucket> buckets;
  for (std::size_t b = 0; b < plan.size(); ++b) {
    const auto& group = odd_bucket_twin_ && b % 2 == 1 ? odd_bucket_twin_ : group_;
    buckets.emplace_back(b, b + 1 == plan.size(), plan[b], params_, group, options_.gradient_as_bucket_view);
  }
  buckets_ = std::move(buckets);
  readiness_ = std::make_unique<Readiness>(plan, params_.size());
}

BucketPlan Reducer::bucket_plan() const {
  BucketPlan plan;
  for (const auto& b : buckets_) plan.push_back(b.members());
  return plan;
}

void Reducer::register_comm_hook(CommHook hook) {
  if (!hook) throw InvalidArgument("register_comm_hook: the hook is empty");
  if (hook_) {
    throw Error(
        "register_comm_hook: a communication hook is already registered; DistributedDataParallel takes one "
        "(register it once, right after construction)");
  }
  if (synced_once_) {
    throw Error(
        "register_comm_hook: a backward pass has already run; register the hook right after constructing "
        "DistributedDataParallel, before the first backward");
  }
  hook_ = std::move(hook);
}

void Reducer::before_forward(JoinContext* join) {
  if (in_backward_) {  // the last backward threw before its end: nothing of it is finished
    settle_launched();
    in_backward_ = false;
    used_.assign(params_.size(), 0);
  }
  join_ = join;
  refresh_hooks();
}

void Reducer::refresh_hooks() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    if (accumulator == accumulators_[i]) continue;
    std::weak_ptr<std::atomic<Reducer*>> self = self_;
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [self, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
      if (auto cell = self.lock()) {
        if (Reducer* reducer = cell->load()) reducer->on_gradient(i);
      }
      return outputs;
    }));
    accumulators_[i] = std::move(accumulator);  // the parameter holds it only weakly
  }
}

namespace {

// Runs `fn` when a backward reaches the node it is added to, inside that backward's graph task.
class BackwardReachedHook final : public torch::autograd::FunctionPreHook {
 public:
  explicit BackwardReachedHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    fn_();
    return grads;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

void Reducer::after_forward(const std::vector<at::Tensor>& outputs) {
  // The backward starts where it reaches an output (PyTorch's _DDPSink), not at the first
  // gradient: a gradient may first arrive inside a re-entrant backward (activation
  // checkpointing), whose graph task would run the end-of-backward callback too early.
  if (!no_sync_) {
    std::weak_ptr<std::atomic<Reducer*>> self = self_;
    for (const auto& output : outputs) {
      if (!output.defined() || !output.grad_fn()) continue;
      output.grad_fn()->add_pre_hook(std::make_unique<BackwardReachedHook>([self] {
        if (auto cell = self.lock()) {
          if (Reducer* reducer = cell->load(); reducer && !reducer->no_sync_ && !reducer->in_backward_) {
            reducer->begin_backward();
          }
        }
      }));
    }
  }
  // static_graph needs no search: the first backward counts what arrives.
  if (!options_.find_unused_parameters || options_.static_graph || no_sync_) return;
  unreached_.clear();
  if (outputs.empty()) return;  // unknown output type: unused parameters are found at the end of backward
  unreached_ = unreached_parameters(outputs, accumulators_);
}

// Autograd thread: parameter i's gradient has been accumulated into .grad.
void Reducer::on_gradient(std::size_t i) {
  used_[i] = 1;  // also under no_sync: the accumulated gradient counts at the next synchronization
  if (no_sync_) {
    if (!in_local_backward_) begin_local_backward();
    return;
  }
  if (!in_backward_) begin_backward();
  switch (arrivals_.arrive(i)) {
    case Arrivals::Verdict::Counted:
    case Arrivals::Verdict::Waiting: return;
    case Arrivals::Verdict::TooMany:
      if (options_.static_graph) {
        fail(cat("DistributedDataParallel (static_graph): the graph changed after the first iteration: ",
                 describe_arrivals({i}),
                 ". static_graph needs the same graph in every iteration; construct DDP without it (with "
                 "find_unused_parameters if some parameters go unused) when the graph changes."));
      }
      fail(cat("DistributedDataParallel: parameter ", describe({i}),
               " received its gradient twice in one backward pass (a re-entrant backward, as activation "
               "checkpointing runs, or one parameter used in several checkpointed segments), so its bucket may "
               "be all-reduced without the second part. If the graph is the same in every iteration, construct "
               "DDP with {.static_graph = true}: it counts how often each gradient arrives."));
    case Arrivals::Verdict::Ready: break;
  }
  if (readiness_->is_ready(i)) {  // marked at the start as unreached by the forward's graph
    fail(cat("DistributedDataParallel: parameter ", describe({i}),
             " received a gradient although the forward's graph does not reach it (a re-entrant backward, as "
             "activation checkpointing runs, recomputes the forward inside backward). Construct DDP with "
             "{.static_graph = true} instead of find_unused_parameters if the graph is the same in every "
             "iteration."));
  }
  mark_ready(i);
}

void Reducer::start_iteration() {
  readiness_->reset();
  arrivals_.reset();
  divisor_ = 0;
  for (auto& bucket : buckets_) bucket.forget();
}

void Reducer::begin_backward() {
  in_backward_ = true;
  backward_start_ = Clock::now();
  start_iteration();
  std::weak_ptr<std::atomic<Reducer*>> self = self_;
  torch::autograd::Engine::get_default_engine().queue_callback([self] {
    if (auto cell = self.lock()) {
      if (Reducer* reducer = cell->load()) reducer->finalize();
    }
  });
  // Gradients that will not come: their buckets need not wait for them.
  const auto never = options_.static_graph ? arrivals_.never_expected() : unreached_;
  for (std::size_t p : never) mark_ready(p);
}

void Reducer::shadow_backward(JoinContext& join) {
  join_ = &join;
  backward_start_ = Clock::now();
  used_.assign(params_.size(), 0);  // this rank contributes zeros
  start_iteration();
  for (std::size_t p = 0; p < params_.size(); ++p) mark_ready(p);  // every bucket, in bucket order
  finalize(/*shadow=*/true);
}

void Reducer::begin_local_backward() {
  in_local_backward_ = true;
  std::weak_ptr<std::atomic<Reducer*>> self = self_;
  torch::autograd::Engine::get_default_engine().queue_callback([self] {
    if (auto cell = self.lock()) {
      if (Reducer* reducer = cell->load()) {
        reducer->in_local_backward_ = false;
        const auto end = Clock::now();
        reducer->clock_.backward_ends(end, end, end, /*synchronized=*/false);
      }
    }
  });
}

void Reducer::mark_ready(std::size_t p) {
  for (std::size_t b : readiness_->mark_ready(p)) launch(b);
}

int Reducer::divisor() {
  if (divisor_ == 0) {
    const bool over_training = join_ && !join_->options().divide_by_initial_world_size;
    divisor_ = over_training ? static_cast<int>(join_->training_ranks().size()) : world_;
  }
  return divisor_;
}

void Reducer::launch(std::size_t b) {
  if (skip_communication()) return;
  const auto start = Clock::now();
  Bucket& bucket = buckets_[b];
  bucket.fill(used_, hook_ ? 0 : divisor());
  const auto launched = Clock::now();
  bucket.launch(hook_);
  if (timeline_) {
    const auto bytes = bucket.bytes();
    timeline_->span(cat("fill bucket ", b), Timeline::kCompute, start, launched);
    bucket.future()->work()->then([timeline = timeline_, b, bytes, launched](Work&) {
      timeline->span(cat("all_reduce bucket ", b), Timeline::kCommunication, launched, Clock::now(),
                     cat("\"bytes\": ", bytes));
    });
  }
}

// End of backward (queued on the autograd engine; a rank that has joined calls it from its
// shadow): every bucket launched, waited for, written back.
void Reducer::finalize(bool shadow) {
  in_backward_ = false;
  const auto backward_end = Clock::now();
  if (arrivals_.learning()) {
    // static_graph's first backward: launched only now, in the order the gradients arrived.
    for (std::size_t p : arrivals_.first_arrivals()) mark_ready(p);
    for (std::size_t p = 0; p < params_.size(); ++p) mark_ready(p);
  } else if (options_.static_graph && !shadow) {
    const auto missing = arrivals_.short_of_expected();
    if (!missing.empty()) {
      fail(cat("DistributedDataParallel (static_graph): the graph changed after the first iteration: ",
               describe_arrivals(missing),
               ". static_graph needs the same graph in every iteration; construct DDP without it (with "
               "find_unused_parameters if some parameters go unused) when the graph changes."));
    }
  } else if (const auto unready = readiness_->unready(); !unready.empty()) {
    if (!options_.find_unused_parameters) {
      fail(cat("DistributedDataParallel: ", unready.size(), " parameter", unready.size() == 1 ? "" : "s",
               " received no gradient in this backward pass (", describe(unready),
               "), so their buckets could not be all-reduced. If some parameters are not used in every forward (a "
               "branch taken only sometimes), construct DDP with {.find_unused_parameters = true}; otherwise make "
               "the loss depend on every parameter, or set requires_grad(false) on the ones you do not train."));
    }
    for (std::size_t p : unready) mark_ready(p);
  }
  const auto used = globally_used();
  const auto wait_start = Clock::now();
  if (!skip_communication()) write_back(used);
  const auto end = Clock::now();
  clock_.backward_ends(backward_end, wait_start, end, /*synchronized=*/true);
  if (timeline_) {
    timeline_->span("backward", Timeline::kCompute, backward_start_, backward_end);
    timeline_->span("wait for buckets", Timeline::kCompute, wait_start, end);
  }
  used_.assign(params_.size(), 0);
  if (!synced_once_) {
    synced_once_ = true;
    if (!options_.find_unused_parameters || options_.static_graph) rebuild_buckets();
  }
  join_ = nullptr;
}

// Called inside a backward that cannot go on: its launched buckets are waited for (the other
// ranks launched them too), the next backward starts afresh.
void Reducer::fail(const std::string& message) {
  settle_launched();
  in_backward_ = false;
  used_.assign(params_.size(), 0);
  join_ = nullptr;
  throw Error(message);
}

std::string Reducer::describe(const std::vector<std::size_t>& params) const {
  std::vector<std::string> listed;
  for (std::size_t k = 0; k < params.size() && k < kListed; ++k) {
    listed.push_back(cat("'", names_[params[k]], "' ", shape_of(params_[params[k]])));
  }
  return join(listed, ", ") + (params.size() > kListed ? ", ..." : "");
}

std::string Reducer::describe_arrivals(const std::vector<std::size_t>& params) const {
  std::vector<std::string> listed;
  for (std::size_t k = 0; k < params.size() && k < kListed; ++k) {
    const std::size_t p = params[k];
    listed.push_back(cat("parameter ", describe({p}), " received its gradient ", times(arrivals_.arrived(p)),
                         " in this backward pass, ", times(arrivals_.expected(p)), " in the first"));
  }
  return join(listed, "; ") + (params.size() > kListed ? "; ..." : "");
}

// Which parameters some rank used (MAX over the ranks), or empty for all of them: searched
// every iteration with find_unused_parameters, learned once with static_graph.
std::vector<std::uint8_t> Reducer::globally_used() {
  if (skip_communication()) return {};
  if (options_.static_graph) {
    if (arrivals_.learning()) static_used_ = all_reduce_used();
    return static_used_;
  }
  if (!options_.find_unused_parameters) return {};
  return all_reduce_used();
}

std::vector<std::uint8_t> Reducer::all_reduce_used() {
  const auto device = params_.front().device();  // nccl takes CUDA tensors only
  at::Tensor used = at::from_blob(used_.data(), {static_cast<std::int64_t>(used_.size())}, at::kByte)
                        .to(device, /*non_blocking=*/false, /*copy=*/true);
  all_reduce(used, ReduceOp::MAX, group_);
  used = used.cpu();
  return {used.data_ptr<std::uint8_t>(), used.data_ptr<std::uint8_t>() + used.numel()};
}

void Reducer::write_back(const std::vector<std::uint8_t>& globally_used) {
  try {
    for (auto& bucket : buckets_) bucket.write_back(globally_used);
  } catch (...) {
    for (auto& bucket : buckets_) bucket.forget();
    throw;
  }
}

// The rank whose arrival order (and with static_graph arrival counts) every rank adopts: rank 0,
// or under a join the lowest rank still training (one that has joined saw no gradients).
int Reducer::rebuild_root() { return join_ ? join_->training_ranks().front() : 0; }

// After the first synchronized backward: buckets in the order gradients really arrived (the
// root's order, broadcast, so that every rank builds the same buckets); with static_graph also
// how often each arrived, which every rank expects from now on.
void Reducer::rebuild_buckets() {
  const bool learning = arrivals_.learning();
  if (skip_communication()) {
    if (learning) arrivals_.learn(arrivals_.arrived());
    return;
  }
  const auto n = static_cast<std::int64_t>(params_.size());
  const auto& seen = readiness_->ready_order();
  at::Tensor message = at::full({learning ? 2 * n : n}, -1, at::kLong);
  auto* values = message.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < seen.size(); ++i) values[i] = static_cast<std::int64_t>(seen[i]);
  if (learning) {
    for (std::int64_t p = 0; p < n; ++p) values[n + p] = arrivals_.arrived(static_cast<std::size_t>(p));
  }
  message = message.to(params_.front().device());  // nccl takes CUDA tensors only
  broadcast(message, rebuild_root(), group_);
  message = message.cpu().contiguous();
  const auto* first = message.data_ptr<std::int64_t>();
  if (learning) arrivals_.learn(std::vector<int>(first + n, first + 2 * n));
  auto plan = plan_buckets(specs_, observed_order({first, first + n}, params_.size()), first_cap(), cap());
  if (plan != bucket_plan()) build_buckets(plan);
}

void Reducer::settle_launched() {
  for (auto& bucket : buckets_) bucket.settle();
}

}  // namespace ddp::detail
