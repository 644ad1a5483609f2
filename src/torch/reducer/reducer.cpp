#include "reducer/reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <sstream>

#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "reducer/unused_parameters.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr std::size_t kFirstBucketBytes = std::size_t{1} << 20;

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

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
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
      used_(params_.size(), 0),
      self_(std::make_shared<std::atomic<Reducer*>>(this)) {
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
    buckets.emplace_back(b, b + 1 == plan.size(), plan[b], params_, group_, options_.gradient_as_bucket_view);
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
    throw Error("register_comm_hook: a communication hook is already registered; DistributedDataParallel takes one "
                "(register it once, right after construction)");
  }
  if (synced_once_) {
    throw Error("register_comm_hook: a backward pass has already run; register the hook right after constructing "
                "DistributedDataParallel, before the first backward");
  }
  hook_ = std::move(hook);
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

void Reducer::after_forward(const std::vector<at::Tensor>& outputs) {
  if (!options_.find_unused_parameters || no_sync_) return;
  if (options_.static_graph && traversed_) return;  // the same parameters every iteration
  unreached_.clear();
  if (outputs.empty()) return;  // unknown output type: unused parameters are found at the end of backward
  unreached_ = unreached_parameters(outputs, accumulators_);
  traversed_ = true;
}

// Autograd thread: parameter i's gradient has been accumulated into .grad.
void Reducer::on_gradient(std::size_t i) {
  used_[i] = 1;  // also under no_sync: the accumulated gradient counts at the next synchronization
  if (no_sync_) {
    if (!in_local_backward_) begin_local_backward();
    return;
  }
  if (!in_backward_) begin_backward();
  mark_ready(i);
}

void Reducer::begin_backward() {
  in_backward_ = true;
  backward_start_ = Clock::now();
  readiness_->reset();
  for (auto& bucket : buckets_) bucket.forget();
  std::weak_ptr<std::atomic<Reducer*>> self = self_;
  torch::autograd::Engine::get_default_engine().queue_callback([self] {
    if (auto cell = self.lock()) {
      if (Reducer* reducer = cell->load()) reducer->finalize();
    }
  });
  for (std::size_t p : unreached_) mark_ready(p);  // found unused in forward: launch their buckets early
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

void Reducer::launch(std::size_t b) {
  if (skip_communication()) return;
  const auto start = Clock::now();
  Bucket& bucket = buckets_[b];
  bucket.fill(used_, /*average=*/!hook_);
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

// End of backward (queued on the autograd engine): every bucket launched, waited for, written back.
void Reducer::finalize() {
  in_backward_ = false;
  const auto backward_end = Clock::now();
  const auto unready = readiness_->unready();
  if (!unready.empty()) {
    if (!options_.find_unused_parameters) throw_unready(unready);
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
}

void Reducer::throw_unready(const std::vector<std::size_t>& unready) {
  settle_launched();
  std::vector<std::string> missing;
  for (std::size_t k = 0; k < unready.size() && k < 5; ++k) {
    missing.push_back(cat("'", names_[unready[k]], "' ", shape_of(params_[unready[k]])));
  }
  throw Error(cat("DistributedDataParallel: ", unready.size(), " parameter", unready.size() == 1 ? "" : "s",
                  " received no gradient in this backward pass (", join(missing, ", "), unready.size() > 5 ? ", ..." : "",
                  "), so their buckets could not be all-reduced. If some parameters are not used in every forward (a "
                  "branch taken only sometimes), construct DDP with {.find_unused_parameters = true}; otherwise make "
                  "the loss depend on every parameter, or set requires_grad(false) on the ones you do not train."));
}

// find_unused_parameters: which parameters some rank used (MAX over the ranks); empty otherwise.
std::vector<std::uint8_t> Reducer::globally_used() {
  if (!options_.find_unused_parameters || skip_communication()) return {};
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

// After the first synchronized backward: buckets in the order gradients really arrived (rank
// 0's order, broadcast, so that every rank builds the same buckets).
void Reducer::rebuild_buckets() {
  if (skip_communication()) return;
  const auto& seen = readiness_->ready_order();
  at::Tensor order = at::full({static_cast<std::int64_t>(params_.size())}, -1, at::kLong);
  for (std::size_t i = 0; i < seen.size(); ++i) order[static_cast<std::int64_t>(i)] = static_cast<std::int64_t>(seen[i]);
  order = order.to(params_.front().device());  // nccl takes CUDA tensors only
  broadcast(order, 0, group_);
  order = order.cpu().contiguous();
  const auto* first = order.data_ptr<std::int64_t>();
  auto plan = plan_buckets(specs_, observed_order({first, first + order.numel()}, params_.size()), first_cap(), cap());
  if (plan != bucket_plan()) build_buckets(plan);
}

void Reducer::settle_launched() {
  for (auto& bucket : buckets_) bucket.settle();
}

}  // namespace ddp::detail
