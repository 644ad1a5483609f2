// DDPCore: what DistributedDataParallel does for any module type. Construction collects the
// parameters and buffers, checks them and makes the ranks agree (model_sync.h); each forward
// broadcasts the buffers and tells the reducer (reducer.h) what the graph reaches; the reducer
// does the gradient averaging during backward. Under a join (ddp/torch/join.h) the join hook
// shadows all of that on a rank that has run out of inputs.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/torch/checkpoint.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/distributed_data_parallel.h"
#include "net/socket.h"
#include "reducer/ddp_variables.h"
#include "reducer/model_sync.h"
#include "reducer/reducer.h"
#include "reducer/timeline.h"
#include "util/log.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

struct ModuleState {
  std::vector<std::string> names;  // of the parameters
  std::vector<at::Tensor> params;  // that need gradients, each tensor once (tied parameters are shared)
  std::vector<at::Tensor> buffers;
};

ModuleState collect(torch::nn::Module& module) {
  ModuleState state;
  std::unordered_set<const void*> seen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
    state.names.push_back(item.key());
    state.params.push_back(item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) state.buffers.push_back(item.value());
  }
  if (state.params.empty()) {
    throw InvalidArgument(
        "DistributedDataParallel: the module has no parameters that require gradients; there is "
        "nothing to synchronize");
  }
  return state;
}

void check_devices(const ModuleState& state, const DDPOptions& options) {
  const auto& params = state.params;
  const auto& names = state.names;
  const auto device = params.front().device();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].device() != device) {
      throw InvalidArgument(cat("DistributedDataParallel: parameter '", names[i], "' is on ", params[i].device(),
                                " but '", names[0], "' is on ", device,
                                "; a DDP module lives on one device (one process per device)"));
    }
  }
  if (device.is_cpu() && (!options.device_ids.empty() || options.output_device)) {
    throw InvalidArgument(
        "DistributedDataParallel: device_ids and output_device are for CUDA modules; this module is "
        "on the CPU, so leave them empty (as in PyTorch)");
  }
  if (device.is_cuda() && !options.device_ids.empty() &&
      (options.device_ids.size() != 1 || options.device_ids[0] != device.index())) {
    throw InvalidArgument(cat("DistributedDataParallel: device_ids must name the one device the module is on (cuda:",
                              static_cast<int>(device.index()), "), e.g. {.device_ids = {local_rank}}"));
  }
  if (options.output_device &&
      (*options.output_device < 0 || *options.output_device >= static_cast<int>(torch::cuda::device_count()))) {
    throw InvalidArgument(cat("DistributedDataParallel: output_device ", *options.output_device,
                              " is not a CUDA device of this process (it sees ",
                              static_cast<int>(torch::cuda::device_count()), ")"));
  }
}

// Under ddprun, DDP_STRAGGLER_REPORT (`path`, from the group's variables) names the file where the
// launcher finds the last report for its summary. Not being able to write it costs only that
// line, so it is logged, not thrown.
void tell_launcher(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  try {
    write_file_atomically(path, text + "\n");
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "cannot write the straggler report for the launcher (DDP_STRAGGLER_REPORT): ", e.what());
  }
}

}  // namespace

class DDPCore::Impl {
 public:
  Impl(torch::nn::Module& module, DDPOptions options) : options_(std::move(options)) {
    group_ = options_.process_group ? options_.process_group : get_default_group();
    VariableProblems problems;
    settings_ = read_variables(kDdpVariables, with_overrides(group_->variables()), problems);
    problems.log_warnings();
    if (!(options_.bucket_cap_mb > 0)) {
      throw InvalidArgument(
          cat("DistributedDataParallel: bucket_cap_mb must be positive, got ", options_.bucket_cap_mb));
    }
    auto state = collect(module);
    check_devices(state, options_);
    check_same_parameters(group_, state.names, state.params);
    if (options_.init_sync) {
      std::vector<at::Tensor> all = state.params;
      all.insert(all.end(), state.buffers.begin(), state.buffers.end());
      broadcast_coalesced(group_, all, 0);
    }
    buffers_ = std::move(state.buffers);
    states_ = state.params;
    states_.insert(states_.end(), buffers_.begin(), buffers_.end());
    device_ = state.params.front().device();
    timeline_ = Timeline::open(settings_.timeline, group_->rank());
    reducer_ = std::make_unique<Reducer>(group_, std::move(state.params), std::move(state.names), options_,
                                         timeline_.get(), clock_);
  }

  // `join`: the running join; under one, buffers come from the highest rank still training (rank
  // 0 may have joined), as in PyTorch.
  void pre_forward(JoinContext* join) {
    forward_start_ = Clock::now();
    clock_.forward_begins(forward_start_);
    reducer_->before_forward(join);
    if (broadcasts_buffers()) broadcast_buffers(join ? join->training_ranks().back() : 0);
  }

  bool broadcasts_buffers() const {
    return options_.broadcast_buffers && !reducer_->no_sync() && group_->size() > 1 && !buffers_.empty();
  }
  void broadcast_buffers(int root) { broadcast_coalesced(group_, buffers_, root); }
  // What a rank that has joined must shadow of this iteration.
  JoinIteration join_iteration() const {
    return {.broadcasts_buffers = broadcasts_buffers(),
            .syncs_gradients = !reducer_->no_sync() && at::GradMode::is_enabled()};
  }
  // After a join: `root`'s parameters and buffers everywhere.
  void sync_model(int root) { broadcast_coalesced(group_, states_, root); }
  const at::Device& device() const { return device_; }

  void post_forward(const std::vector<at::Tensor>& outputs) {
    const auto end = Clock::now();
    clock_.forward_ends(end);
    if (timeline_) timeline_->span("forward", Timeline::kCompute, forward_start_, end);
    reducer_->after_forward(outputs);
  }

  // Collective: one all_gather of every rank's step times since the previous report.
  StragglerReport straggler_report() {
    struct Wire {  // one rank's times, as the all_gather carries them
      double steps, forward, backward, bucket_wait, outside;
      char host[64];
    };
    const RankStepTimes mine = clock_.take();
    Wire wire{static_cast<double>(mine.steps), mine.forward, mine.backward, mine.bucket_wait, mine.outside, {}};
    const std::string host = local_hostname();
    std::strncpy(wire.host, host.c_str(), sizeof wire.host - 1);
    std::vector<Wire> all(static_cast<std::size_t>(group_->size()));
    // Through tensors on the group's collective device: nccl alone takes no host memory.
    const at::Tensor in =
        at::from_blob(&wire, {static_cast<std::int64_t>(sizeof wire)}, at::kByte).to(collective_device(group_));
    at::Tensor out = at::empty({static_cast<std::int64_t>(sizeof(Wire) * all.size())}, in.options());
    all_gather_into_tensor(out, in, group_);
    std::memcpy(all.data(), out.cpu().data_ptr(), sizeof(Wire) * all.size());
    std::vector<RankStepTimes> ranks;
    for (std::size_t r = 0; r < all.size(); ++r) {
      const Wire& w = all[r];
      ranks.push_back({static_cast<int>(r), std::string(w.host, strnlen(w.host, sizeof w.host)),
                       static_cast<std::int64_t>(w.steps), w.forward, w.backward, w.bucket_wait, w.outside});
    }
    StragglerReport report = make_straggler_report(std::move(ranks));
    if (group_->rank() == 0) tell_launcher(settings_.straggler_report, report.text);
    return report;
  }

  Reducer& reducer() { return *reducer_; }
  const Reducer& reducer() const { return *reducer_; }
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

 private:
  DDPOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  DdpSettings settings_;  // its variables, read once as it was constructed
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> states_;  // parameters, then buffers: what construction and a join's end broadcast
  at::Device device_{at::kCPU};
  std::unique_ptr<Timeline> timeline_;  // before reducer_: it outlives the reducer
  StepClock clock_;                     // likewise
  std::unique_ptr<Reducer> reducer_;
  Clock::time_point forward_start_;
};

namespace {

// DDP's part in a join (PyTorch's _DDPJoinHook): each iteration of the ranks still training, the
// buffer broadcast and a backward's collectives with zeros; at the end, the last rank to join
// broadcasts its model.
class DDPJoinHook final : public JoinHook {
 public:
  DDPJoinHook(DDPCore::Impl& ddp, JoinContext& join) : ddp_(ddp), join_(join) {}
  void main_hook() override {
    const auto iteration = join_.iteration();
    if (iteration.broadcasts_buffers) ddp_.broadcast_buffers(join_.training_ranks().back());
    if (iteration.syncs_gradients) ddp_.reducer().shadow_backward(join_);
  }
  void post_hook(bool) override { ddp_.sync_model(join_.last_joiners().back()); }

 private:
  DDPCore::Impl& ddp_;
  JoinContext& join_;
};

}  // namespace

DDPCore::DDPCore(torch::nn::Module& module, DDPOptions options)
    : impl_(std::make_unique<Impl>(module, std::move(options))) {}
DDPCore::~DDPCore() = default;
void DDPCore::pre_forward(JoinContext* join) { impl_->pre_forward(join); }
JoinIteration DDPCore::join_iteration() const { return impl_->join_iteration(); }
std::unique_ptr<JoinHook> DDPCore::join_hook(JoinContext& context) {
  return std::make_unique<DDPJoinHook>(*impl_, context);
}
at::Device DDPCore::device() const { return impl_->device(); }
void DDPCore::post_forward(const std::vector<at::Tensor>& outputs) { impl_->post_forward(outputs); }
void DDPCore::set_no_sync(bool on) { impl_->reducer().set_no_sync(on); }
bool DDPCore::no_sync() const { return impl_->reducer().no_sync(); }
void DDPCore::register_comm_hook(CommHook hook) { impl_->reducer().register_comm_hook(std::move(hook)); }
const std::shared_ptr<ProcessGroup>& DDPCore::process_group() const { return impl_->process_group(); }
const DDPOptions& DDPCore::options() const { return impl_->options(); }
std::optional<at::Device> DDPCore::input_device() const { return impl_->input_device(); }
std::optional<at::Device> DDPCore::output_device() const { return impl_->output_device(); }
std::vector<std::vector<std::size_t>> DDPCore::bucket_plan() const { return impl_->reducer().bucket_plan(); }
StragglerReport DDPCore::straggler_report() { return impl_->straggler_report(); }

}  // namespace ddp::detail
