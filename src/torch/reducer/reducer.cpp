// DDPCore: the per-iteration work of DistributedDataParallel. Gradient hooks (on the autograd
// thread) mark parameters ready; complete buckets are filled and handed to the comm hook at once,
// in bucket order; a callback queued on the autograd engine runs at the end of backward, waits
// for every bucket and writes the averaged gradients back. The bucket plan (bucket_plan.h) and
// the readiness bookkeeping (readiness.h) are pure and live apart.
#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>

#include <atomic>
#include <unordered_set>

#include "bucket_allreduce.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/distributed_data_parallel.h"
#include "reducer/bucket_plan.h"
#include "reducer/model_sync.h"
#include "reducer/readiness.h"
#include "reducer/timeline.h"
#include "util/error_kind.h"
#include "util/strings.h"

namespace ddp::detail {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kFirstBucketBytes = std::size_t{1} << 20;

// A tensor over `view`'s memory that autograd does not know as a view: what .grad points to
// with gradient_as_bucket_view, so that LibTorch 1.x's Optimizer::zero_grad (which calls detach_(),
// refused on views) keeps working. It keeps the bucket alive.
at::Tensor grad_alias(const at::Tensor& view, const at::Tensor& flat) {
  return at::from_blob(view.data_ptr(), view.sizes(), [keep = flat](void*) {}, view.options());
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

class DDPCore::Impl {
 public:
  Impl(torch::nn::Module& module, DDPOptions options) : options_(std::move(options)) {
    group_ = options_.process_group ? options_.process_group : get_default_group();
    world_ = group_->size();
    reciprocal_ = at::native::wrapped_scalar_tensor(1.0 / world_);
    if (!(options_.bucket_cap_mb > 0)) {
      throw InvalidArgument(cat("DistributedDataParallel: bucket_cap_mb must be positive, got ", options_.bucket_cap_mb));
    }
    collect(module);
    check_devices();
    check_same_parameters(group_, names_, params_);
    if (options_.init_sync) {
      std::vector<at::Tensor> state = params_;
      state.insert(state.end(), buffers_.begin(), buffers_.end());
      broadcast_coalesced(group_, state, 0);
    }
    for (const auto& p : params_) {
      specs_.push_back({static_cast<std::size_t>(p.numel()) * p.element_size(), group_of(p)});
    }
    build_buckets(plan_buckets(specs_, reverse_order(params_.size()), first_cap(), cap()));
    used_.assign(params_.size(), 0);
    self_ = std::make_shared<std::atomic<Impl*>>(this);
    install_hooks();
    timeline_ = Timeline::from_env(group_->rank());
  }

  ~Impl() {
    self_->store(nullptr);  // hooks outlive us on the parameters: make them inert
    wait_launched();
  }

  void pre_forward() {
    forward_start_ = Clock::now();
    refresh_hooks();
    if (options_.broadcast_buffers && !no_sync_ && world_ > 1 && !buffers_.empty()) {
      broadcast_coalesced(group_, buffers_, 0);
    }
  }

  void post_forward(const std::vector<at::Tensor>& outputs) {
    if (timeline_) timeline_->span("forward", Timeline::kCompute, forward_start_, Clock::now());
    if (!options_.find_unused_parameters || no_sync_) return;
    if (options_.static_graph && traversed_) return;  // the same parameters every iteration
    unreached_.clear();
    if (outputs.empty()) return;  // unknown output type: unused parameters are found at the end of backward
    std::unordered_set<const torch::autograd::Node*> seen;
    std::vector<torch::autograd::Node*> stack;
    for (const auto& out : outputs) {
      if (!out.defined()) continue;
      if (auto fn = out.grad_fn()) {
        if (seen.insert(fn.get()).second) stack.push_back(fn.get());
      } else if (out.requires_grad()) {
        auto acc = torch::autograd::impl::try_get_grad_accumulator(out);
        if (acc) seen.insert(acc.get());
      }
    }
    while (!stack.empty()) {
      auto* node = stack.back();
      stack.pop_back();
      for (const auto& edge : node->next_edges()) {
        if (edge.function && seen.insert(edge.function.get()).second) stack.push_back(edge.function.get());
      }
    }
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!seen.count(accumulators_[i].get())) unreached_.push_back(i);
    }
    traversed_ = true;
  }

  void set_no_sync(bool on) { no_sync_ = on; }
  bool no_sync() const { return no_sync_; }

  void register_comm_hook(CommHook hook) {
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

  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  const DDPOptions& options() const { return options_; }
  // device_ids[0], where the forward's tensor arguments are moved (as PyTorch does); none: left as they are.
  std::optional<at::Device> input_device() const {
    if (options_.device_ids.empty()) return std::nullopt;
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(options_.device_ids[0]));
  }
  // output_device, where the forward's tensors are moved when it is not the module's device.
  std::optional<at::Device> output_device() const {
    if (!options_.output_device) return std::nullopt;
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(*options_.output_device));
  }

  BucketPlan bucket_plan() const {
    BucketPlan plan;
    for (const auto& b : buckets_) plan.push_back(b.params);
    return plan;
  }

 private:
  struct Bucket {
    std::vector<std::size_t> params;
    at::Tensor flat;
    std::vector<at::Tensor> views;  // per parameter, shaped like it, into `flat`
  };

  std::size_t cap() const { return static_cast<std::size_t>(options_.bucket_cap_mb * 1024 * 1024); }
  std::size_t first_cap() const { return std::min(kFirstBucketBytes, cap()); }

  int group_of(const at::Tensor& p) {
    std::pair<int, int> key{static_cast<int>(p.scalar_type()), p.is_cuda() ? p.get_device() : -1};
    auto it = std::find(groups_.begin(), groups_.end(), key);
    if (it != groups_.end()) return static_cast<int>(it - groups_.begin());
    groups_.push_back(key);
    return static_cast<int>(groups_.size() - 1);
  }

  // Parameters that need gradients and buffers, each tensor once (tied parameters are shared).
  void collect(torch::nn::Module& module) {
    std::unordered_set<const void*> seen;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      if (!item.value().requires_grad() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
      names_.push_back(item.key());
      params_.push_back(item.value());
    }
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      if (seen.insert(item.value().unsafeGetTensorImpl()).second) buffers_.push_back(item.value());
    }
    if (params_.empty()) {
      throw InvalidArgument("DistributedDataParallel: the module has no parameters that require gradients; there is "
                            "nothing to synchronize");
    }
  }

  void check_devices() const {
    const auto device = params_.front().device();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].device() != device) {
        throw InvalidArgument(cat("DistributedDataParallel: parameter '", names_[i], "' is on ", params_[i].device(),
                                  " but '", names_[0], "' is on ", device,
                                  "; a DDP module lives on one device (one process per device)"));
      }
    }
    if (device.is_cpu() && (!options_.device_ids.empty() || options_.output_device)) {
      throw InvalidArgument("DistributedDataParallel: device_ids and output_device are for CUDA modules; this module is "
                            "on the CPU, so leave them empty (as in PyTorch)");
    }
    if (device.is_cuda() && !options_.device_ids.empty() &&
        (options_.device_ids.size() != 1 || options_.device_ids[0] != device.index())) {
      throw InvalidArgument(cat("DistributedDataParallel: device_ids must name the one device the module is on (cuda:",
                                static_cast<int>(device.index()), "), e.g. {.device_ids = {local_rank}}"));
    }
    if (options_.output_device && (*options_.output_device < 0 ||
                                   *options_.output_device >= static_cast<int>(torch::cuda::device_count()))) {
      throw InvalidArgument(cat("DistributedDataParallel: output_device ", *options_.output_device,
                                " is not a CUDA device of this process (it sees ", torch::cuda::device_count(), ")"));
    }
  }

  void build_buckets(const BucketPlan& plan) {
    std::vector<Bucket> buckets;
    for (const auto& members : plan) {
      Bucket b;
      b.params = members;
      std::int64_t total = 0;
      for (std::size_t p : members) total += params_[p].numel();
      const auto& first = params_[members.front()];
      b.flat = at::zeros({total}, first.options().requires_grad(false));
      std::int64_t offset = 0;
      for (std::size_t p : members) {
        b.views.push_back(b.flat.narrow(0, offset, params_[p].numel()).view(params_[p].sizes()));
        offset += params_[p].numel();
      }
      buckets.push_back(std::move(b));
    }
    buckets_ = std::move(buckets);
    readiness_ = std::make_unique<Readiness>(plan, params_.size());
    futures_.assign(buckets_.size(), nullptr);
    if (options_.gradient_as_bucket_view) {
      at::NoGradGuard no_grad;
      for (auto& b : buckets_) {
        for (std::size_t k = 0; k < b.params.size(); ++k) {
          at::Tensor& grad = params_[b.params[k]].mutable_grad();
          if (grad.defined()) b.views[k].copy_(grad);
          grad = grad_alias(b.views[k], b.flat);
        }
      }
    }
  }

  void install_hooks() {
    accumulators_.resize(params_.size());
    refresh_hooks();
  }

  // Hooks each parameter's gradient accumulator. Run before every forward too: replacing a
  // parameter's data (Module::load, set_) can give it a new accumulator, which would otherwise
  // accumulate without telling us, and the ranks' gradients would silently stop being averaged.
  void refresh_hooks() {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
      if (accumulator == accumulators_[i]) continue;
      std::weak_ptr<std::atomic<Impl*>> self = self_;
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [self, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            if (auto cell = self.lock()) {
              if (Impl* impl = cell->load()) impl->on_gradient(i);
            }
            return outputs;
          }));
      accumulators_[i] = std::move(accumulator);  // the parameter holds it only weakly
    }
  }

  // Autograd thread: parameter i's gradient has been accumulated into .grad.
  void on_gradient(std::size_t i) {
    used_[i] = 1;  // also under no_sync: the accumulated gradient counts at the next synchronization
    if (no_sync_) return;
    if (!in_backward_) begin_backward();
    mark_ready(i);
  }

  void begin_backward() {
    in_backward_ = true;
    backward_start_ = Clock::now();
    readiness_->reset();
    futures_.assign(buckets_.size(), nullptr);
    std::weak_ptr<std::atomic<Impl*>> self = self_;
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (auto cell = self.lock()) {
        if (Impl* impl = cell->load()) impl->finalize();
      }
    });
    for (std::size_t p : unreached_) mark_ready(p);  // found unused in forward: launch their buckets early
  }

  void mark_ready(std::size_t p) {
    bool first_time = false;
    for (std::size_t b : readiness_->mark_ready(p, first_time)) launch(b);
  }

  // Fills bucket b from the gradients and hands it to the comm hook.
  void launch(std::size_t b) {
    const auto start = Clock::now();
    Bucket& bucket = buckets_[b];
    if (skip_communication()) return;
    {
      at::NoGradGuard no_grad;
      // Without a comm hook the average's division happens while filling (one pass over the
      // gradients less), as in PyTorch's reducer and with its arithmetic: a multiplication by
      // 1 / world size while copying, a division in place for a gradient that is a bucket view.
      const bool divide = !hook_;
      for (std::size_t k = 0; k < bucket.params.size(); ++k) {
        at::Tensor& grad = params_[bucket.params[k]].mutable_grad();
        at::Tensor& view = bucket.views[k];
        if (!used_[bucket.params[k]] || !grad.defined()) {
          view.zero_();  // unused here: this rank contributes nothing (a stale .grad must not leak in)
          continue;
        }
        if (grad.data_ptr() == view.data_ptr()) {  // already a view into the bucket
          if (divide) view.div_(world_);
          continue;
        }
        if (divide) at::mul_out(view, grad, reciprocal_);
        else view.copy_(grad);
        if (options_.gradient_as_bucket_view) grad = grad_alias(view, bucket.flat);
      }
    }
    std::vector<at::Tensor> members;
    for (std::size_t p : bucket.params) members.push_back(params_[p]);
    GradBucket grad_bucket(b, b + 1 == buckets_.size(), bucket.flat, std::move(members), group_);
    const auto launched = Clock::now();
    futures_[b] = hook_ ? hook_(grad_bucket) : all_reduce_bucket(grad_bucket);
    if (!futures_[b]) throw Error(cat("DistributedDataParallel: the comm hook returned no future for bucket ", b));
    if (timeline_) {
      const auto bytes = bucket.flat.numel() * bucket.flat.element_size();
      timeline_->span(cat("fill bucket ", b), Timeline::kCompute, start, launched);
      Timeline* timeline = timeline_.get();
      futures_[b]->work()->then([timeline, b, bytes, launched](Work&) {
        timeline->span(cat("all_reduce bucket ", b), Timeline::kCommunication, launched, Clock::now(),
                       cat("\"bytes\": ", bytes));
      });
    }
  }

  // A group of one with the default hook: the average of one gradient is itself.
  bool skip_communication() const { return world_ == 1 && !hook_; }

  // The module's device: where the small tensors DDP exchanges live (nccl takes CUDA tensors only).
  at::Device device() const { return params_.front().device(); }

  // End of backward (queued on the autograd engine): every bucket launched, waited for, written back.
  void finalize() {
    in_backward_ = false;
    const auto backward_end = Clock::now();
    const auto unready = readiness_->unready();
    if (!unready.empty()) {
      if (!options_.find_unused_parameters) {
        wait_launched();
        std::vector<std::string> missing;
        for (std::size_t k = 0; k < unready.size() && k < 5; ++k) {
          missing.push_back(cat("'", names_[unready[k]], "' ", shape_of(params_[unready[k]])));
        }
        throw Error(cat("DistributedDataParallel: ", unready.size(), " parameter", unready.size() == 1 ? "" : "s",
                        " received no gradient in this backward pass (", join(missing, ", "),
                        unready.size() > 5 ? ", ..." : "",
                        "), so their buckets could not be all-reduced. If some parameters are not used in every "
                        "forward (a branch taken only sometimes), construct DDP with {.find_unused_parameters = "
                        "true}; otherwise make the loss depend on every parameter, or set requires_grad(false) on "
                        "the ones you do not train."));
      }
      for (std::size_t p : unready) mark_ready(p);
    }
    std::vector<std::uint8_t> globally_used;
    if (options_.find_unused_parameters && !skip_communication()) {
      at::Tensor used = at::from_blob(used_.data(), {static_cast<std::int64_t>(used_.size())}, at::kByte)
                            .to(device(), /*non_blocking=*/false, /*copy=*/true);
      all_reduce(used, ReduceOp::MAX, group_);
      used = used.cpu();
      globally_used.assign(used.data_ptr<std::uint8_t>(), used.data_ptr<std::uint8_t>() + used.numel());
    }
    const auto wait_start = Clock::now();
    if (!skip_communication()) write_back(globally_used);
    const auto end = Clock::now();
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

  void write_back(const std::vector<std::uint8_t>& globally_used) {
    at::NoGradGuard no_grad;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bucket = buckets_[b];
      at::Tensor result;
      try {
        result = futures_[b]->wait();
      } catch (const Error&) {
        futures_.assign(buckets_.size(), nullptr);
        rethrow_with_context(cat("DistributedDataParallel: the gradient all-reduce of bucket ", b, " failed"));
      }
      if (result.data_ptr() != bucket.flat.data_ptr()) bucket.flat.copy_(result.view({-1}));
      for (std::size_t k = 0; k < bucket.params.size(); ++k) {
        const std::size_t p = bucket.params[k];
        at::Tensor& grad = params_[p].mutable_grad();
        const bool keep_undefined = !globally_used.empty() && !globally_used[p] && !grad.defined();
        if (keep_undefined) continue;  // unused on every rank: as in PyTorch, no gradient at all
        if (options_.gradient_as_bucket_view) {
          if (!grad.defined() || grad.data_ptr() != bucket.views[k].data_ptr()) grad = grad_alias(bucket.views[k], bucket.flat);
        } else if (grad.defined()) {
          grad.copy_(bucket.views[k]);
        } else {
          grad = bucket.views[k].clone();
        }
      }
    }
    futures_.assign(buckets_.size(), nullptr);
  }

  // After the first synchronized backward: buckets in the order gradients really arrived (rank
  // 0's order, broadcast, so that every rank builds the same buckets).
  void rebuild_buckets() {
    if (world_ == 1 && !hook_) return;
    const auto& seen = readiness_->ready_order();
    at::Tensor order = at::full({static_cast<std::int64_t>(params_.size())}, -1, at::kLong);
    for (std::size_t i = 0; i < seen.size(); ++i) order[static_cast<std::int64_t>(i)] = static_cast<std::int64_t>(seen[i]);
    order = order.to(device());  // nccl takes CUDA tensors only
    broadcast(order, 0, group_);
    order = order.cpu();
    std::vector<std::size_t> rank0_order;
    std::vector<bool> listed(params_.size());
    for (std::int64_t i = 0; i < order.numel(); ++i) {
      const auto p = order[i].item<std::int64_t>();
      if (p >= 0 && static_cast<std::size_t>(p) < params_.size() && !listed[p]) {
        rank0_order.push_back(static_cast<std::size_t>(p));
        listed[p] = true;
      }
    }
    for (std::size_t p : reverse_order(params_.size())) {
      if (!listed[p]) rank0_order.push_back(p);
    }
    auto plan = plan_buckets(specs_, rank0_order, first_cap(), cap());
    if (plan != bucket_plan()) build_buckets(plan);
  }

  void wait_launched() {
    for (auto& future : futures_) {
      if (!future) continue;
      try {
        future->work()->wait();
      } catch (...) {
      }
    }
    futures_.assign(buckets_.size(), nullptr);
  }

  DDPOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  int world_ = 1;
  at::Tensor reciprocal_;  // 1 / world_ as PyTorch's reducer multiplies by it (a wrapped Scalar)
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> buffers_;
  std::vector<ParamSpec> specs_;
  std::vector<std::pair<int, int>> groups_;  // (dtype, device) of each spec group
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<Readiness> readiness_;
  std::vector<std::shared_ptr<Future>> futures_;
  std::vector<std::uint8_t> used_;          // this iteration: gradients that really arrived
  std::vector<std::size_t> unreached_;      // found unused by the forward's graph
  CommHook hook_;
  std::shared_ptr<std::atomic<Impl*>> self_;  // what the hooks call, cleared on destruction
  std::unique_ptr<Timeline> timeline_;
  Clock::time_point forward_start_, backward_start_;
  bool in_backward_ = false;
  bool no_sync_ = false;
  bool synced_once_ = false;
  bool traversed_ = false;
};

DDPCore::DDPCore(torch::nn::Module& module, DDPOptions options)
    : impl_(std::make_unique<Impl>(module, std::move(options))) {}
DDPCore::~DDPCore() = default;
void DDPCore::pre_forward() { impl_->pre_forward(); }
void DDPCore::post_forward(const std::vector<at::Tensor>& outputs) { impl_->post_forward(outputs); }
void DDPCore::set_no_sync(bool on) { impl_->set_no_sync(on); }
bool DDPCore::no_sync() const { return impl_->no_sync(); }
void DDPCore::register_comm_hook(CommHook hook) { impl_->register_comm_hook(std::move(hook)); }
const std::shared_ptr<ProcessGroup>& DDPCore::process_group() const { return impl_->process_group(); }
const DDPOptions& DDPCore::options() const { return impl_->options(); }
std::optional<at::Device> DDPCore::input_device() const { return impl_->input_device(); }
std::optional<at::Device> DDPCore::output_device() const { return impl_->output_device(); }
std::vector<std::vector<std::size_t>> DDPCore::bucket_plan() const { return impl_->bucket_plan(); }

}  // namespace ddp::detail
