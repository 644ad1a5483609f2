// ZeroRedundancyOptimizer's type-independent half: the partition, the shard broadcast, and the
// state's consolidation and loading through the optimizer type's own save and load.
#include "ddp/torch/zero_redundancy_optimizer.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cstring>
#include <sstream>
#include <unordered_set>

#include "compat/torch_compat.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerParamGroup;

std::string describe(const at::Tensor& t) {
  return cat(t.is_sparse() ? "sparse " : "", t.scalar_type(), " on ", t.device());
}

// PyTorch's rule: one dense tensor type for every parameter; and each parameter once.
void check_parameters(const std::vector<OptimizerParamGroup>& groups) {
  const at::Tensor* first = nullptr;
  std::unordered_set<const void*> seen;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].params().size(); ++i) {
      const auto& p = groups[g].params()[i];
      if (!seen.insert(p.unsafeGetTensorImpl()).second) {
        throw InvalidArgument(cat("ZeroRedundancyOptimizer: parameter ", i, " of group ", g,
                                  " appears more than once; pass each parameter in one group, once"));
      }
      if (!first) first = &p;
      if (p.is_sparse() || p.scalar_type() != first->scalar_type() || p.device() != first->device()) {
        throw InvalidArgument(
            cat("ZeroRedundancyOptimizer: every parameter must be dense and of one dtype and device, "
                "but the first is ",
                describe(*first), " and parameter ", i, " of group ", g, " is ", describe(p),
                "; convert the model (model->to(...)) or give those parameters an "
                "optimizer of their own"));
      }
    }
  }
  if (!first) throw InvalidArgument("ZeroRedundancyOptimizer: got an empty parameter list");
}

std::vector<OptimizerParamGroup> copy_groups(const std::vector<OptimizerParamGroup>& groups) {
  return {groups.begin(), groups.end()};  // the copy clones each group's options
}

std::string serialize(const Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

// Every rank's bytes, on rank `to` (empty elsewhere): the lengths are all-gathered, then the
// messages, padded to the longest, gathered.
std::vector<std::string> gather_bytes(const std::string& mine, int to, const std::shared_ptr<ProcessGroup>& group) {
  if (!group || group->size() == 1) return {mine};
  const int world = group->size();
  const auto device = collective_device(group);  // nccl alone takes no host memory
  auto lengths = torch::empty({world}, torch::dtype(torch::kLong).device(device));
  ddp::all_gather_into_tensor(lengths, torch::tensor({static_cast<std::int64_t>(mine.size())}, torch::kLong).to(device),
                              group);
  lengths = lengths.cpu();
  const std::int64_t longest = lengths.max().item<std::int64_t>();
  auto padded = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(padded.data_ptr(), mine.data(), mine.size());
  padded = padded.to(device);
  std::vector<at::Tensor> received;
  if (group->rank() == to) {
    for (int r = 0; r < world; ++r) received.push_back(torch::empty({longest}, padded.options()));
  }
  ddp::gather(padded, received, to, group);
  std::vector<std::string> out;
  for (int r = 0; r < static_cast<int>(received.size()); ++r) {
    const at::Tensor bytes = received[r].cpu();
    out.emplace_back(static_cast<const char*>(bytes.data_ptr()),
                     static_cast<std::size_t>(lengths[r].item<std::int64_t>()));
  }
  return out;
}

}  // namespace

ZeroBase::ZeroBase(std::vector<OptimizerParamGroup> param_groups,
                   std::unique_ptr<torch::optim::OptimizerOptions> defaults, ZeroRedundancyOptions options,
                   Factory factory)
    : Optimizer(std::move(param_groups), std::move(defaults)),
      options_(std::move(options)),
      factory_(std::move(factory)) {
  check_parameters(param_groups_);
  group_ = options_.process_group ? options_.process_group : (is_initialized() ? get_default_group() : nullptr);
  if (group_) {
    rank_ = group_->rank();
    world_ = group_->size();
  }
  repartition();
  local_ = factory_(groups_of(rank_));
  build_buckets();
}

void ZeroBase::repartition() {
  std::vector<std::vector<std::int64_t>> numels;
  for (const auto& group : param_groups_) {
    auto& sizes = numels.emplace_back();
    for (const auto& p : group.params()) sizes.push_back(p.numel());
  }
  partition_ = partition_parameters(numels, world_);
}

std::vector<OptimizerParamGroup> ZeroBase::groups_of(int rank) const {
  std::vector<OptimizerParamGroup> groups;
  for (std::size_t g = 0; g < param_groups_.size(); ++g) {
    std::vector<at::Tensor> params;
    for (std::size_t i : partition_[static_cast<std::size_t>(rank)][g]) params.push_back(param_groups_[g].params()[i]);
    groups.emplace_back(std::move(params), param_groups_[g].options().clone());
  }
  return groups;
}

int ZeroBase::owner(std::size_t group, std::size_t index) const {
  if (group >= param_groups_.size() || index >= param_groups_[group].params().size()) {
    throw InvalidArgument(cat("ZeroRedundancyOptimizer::owner: there is no parameter ", index, " in group ", group));
  }
  for (int r = 0; r < world_; ++r) {
    const auto& mine = partition_[static_cast<std::size_t>(r)][group];
    if (std::find(mine.begin(), mine.end(), index) != mine.end()) return r;
  }
  throw Error("ZeroRedundancyOptimizer::owner: the partition lost a parameter (a bug)");
}

void ZeroBase::build_buckets() {
  if (!options_.parameters_as_bucket_view) return;
  torch::NoGradGuard no_grad;
  buckets_.assign(static_cast<std::size_t>(world_), at::Tensor());
  for (int r = 0; r < world_; ++r) {
    std::vector<at::Tensor> params;
    for (const auto& group : groups_of(r)) params.insert(params.end(), group.params().begin(), group.params().end());
    std::int64_t total = 0;
    for (const auto& p : params) total += p.numel();
    if (total == 0) continue;
    auto bucket = torch::empty({total}, params.front().options().requires_grad(false));
    std::int64_t offset = 0;
    for (auto& p : params) {
      auto view = bucket.narrow(0, offset, p.numel());
      view.copy_(p.detach().reshape({-1}));
      p.set_data(view.view(p.sizes()));
      offset += p.numel();
    }
    buckets_[static_cast<std::size_t>(r)] = bucket;
  }
}

void ZeroBase::sync_options(std::vector<OptimizerParamGroup>& from, std::vector<OptimizerParamGroup>& to) const {
  for (std::size_t g = 0; g < from.size() && g < to.size(); ++g) to[g].set_options(from[g].options().clone());
}

namespace {

// A rank that has run out of inputs steps its shard with the averaged gradients of the others'
// iteration (DDP's join hook, which runs first, leaves them in .grad) and broadcasts it.
class ZeroJoinHook final : public JoinHook {
 public:
  explicit ZeroJoinHook(ZeroBase& zero) : zero_(zero) {}
  void main_hook() override { zero_.step(); }

 private:
  ZeroBase& zero_;
};

}  // namespace

std::unique_ptr<JoinHook> ZeroBase::join_hook(JoinContext&) { return std::make_unique<ZeroJoinHook>(*this); }

at::Device ZeroBase::join_device() const { return param_groups_.front().params().front().device(); }

at::Tensor ZeroBase::step(LossClosure closure) {
  notify_join_context();
  // Options changed on the exposed groups (a learning-rate schedule) apply to the shard.
  sync_options(param_groups_, local_->param_groups());
  auto loss = local_->step(std::move(closure));
  sync_options(local_->param_groups(), param_groups_);
  broadcast_shards();
  return loss;
}

void ZeroBase::broadcast_shards() {
  if (world_ == 1) return;
  torch::NoGradGuard no_grad;
  struct Message {
    int owner;
    at::Tensor flat;
    std::vector<at::Tensor> params;
  };
  std::vector<Message> messages;
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < world_; ++r) {
    Message m{r, {}, {}};
    for (const auto& group : groups_of(r))
      m.params.insert(m.params.end(), group.params().begin(), group.params().end());
    std::int64_t total = 0;
    for (const auto& p : m.params) total += p.numel();
    if (total == 0) continue;  // every rank knows the partition: nobody sends or waits
    if (options_.parameters_as_bucket_view) {
      m.flat = buckets_[static_cast<std::size_t>(r)];
    } else if (r == rank_) {
      std::vector<at::Tensor> flat;
      for (const auto& p : m.params) flat.push_back(p.detach().reshape({-1}));
      m.flat = torch::cat(flat);
    } else {
      m.flat = torch::empty({total}, m.params.front().options().requires_grad(false));
    }
    works.push_back(ddp::broadcast_async(m.flat, r, group_));
    messages.push_back(std::move(m));
  }
  for (auto& work : works) work->wait();
  if (options_.parameters_as_bucket_view) return;
  for (auto& m : messages) {
    if (m.owner == rank_) continue;
    std::int64_t offset = 0;
    for (auto& p : m.params) {
      p.detach().copy_(m.flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

void ZeroBase::consolidate_state_dict(int to) {
  if (to < 0 || to >= world_) {
    throw InvalidArgument(cat("ZeroRedundancyOptimizer::consolidate_state_dict: rank ", to, " is not in the group of ",
                              world_, " rank", world_ == 1 ? "" : "s"));
  }
  sync_options(param_groups_, local_->param_groups());
  auto shards = gather_bytes(serialize(*local_), to, group_);
  consolidated_.reset();
  if (rank_ != to) return;
  auto whole = factory_(copy_groups(param_groups_));
  for (int r = 0; r < world_; ++r) {
    // The shard's own optimizer type reads it, over the same parameters, so its state lands
    // under the keys of the whole optimizer's parameters.
    torch::serialize::InputArchive archive;
    archive.load_from(shards[static_cast<std::size_t>(r)].data(), shards[static_cast<std::size_t>(r)].size(),
                      at::Device(at::kCPU));
    auto shard = factory_(groups_of(r));
    shard->load(archive);
    for (auto& [key, state] : shard->state()) whole->state()[key] = std::move(state);
  }
  consolidated_ = std::move(whole);
}

void ZeroBase::save(torch::serialize::OutputArchive& archive) const {
  if (!consolidated_) {
    throw Error(cat("ZeroRedundancyOptimizer::save on rank ", rank_,
                    ": the optimizer state has not been consolidated on "
                    "this rank; call consolidate_state_dict(",
                    rank_, ") on every rank first, then save on rank ", rank_));
  }
  if (consolidated_->param_groups().size() != param_groups_.size()) {
    throw Error(cat("ZeroRedundancyOptimizer::save on rank ", rank_,
                    ": a parameter group was added after "
                    "consolidate_state_dict; consolidate again before saving"));
  }
  auto& groups = consolidated_->param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].set_options(param_groups_[g].options().clone());
  consolidated_->save(archive);
}

void ZeroBase::load(torch::serialize::InputArchive& archive) {
  auto whole = factory_(copy_groups(param_groups_));
  try {
    whole->load(archive);
  } catch (const c10::Error& e) {
    std::string sizes;
    for (const auto& group : param_groups_)
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(group.params().size());
    throw MismatchError(cat("ZeroRedundancyOptimizer::load on rank ", rank_,
                            ": the optimizer state does not fit this "
                            "optimizer (",
                            param_groups_.size(), " parameter group(s) of ", sizes,
                            " parameters): ", e.what_without_backtrace(),
                            "; load a state saved for the same parameters and optimizer type"));
  }
  for (const auto& group : local_->param_groups()) {
    for (const auto& p : group.params()) {
      const auto key = compat::optimizer_state_key(p);
      auto it = whole->state().find(key);
      if (it == whole->state().end()) {
        local_->state().erase(key);
      } else {
        local_->state()[key] = std::move(it->second);
      }
    }
  }
}

void ZeroBase::add_param_group(const OptimizerParamGroup& param_group) {
  auto all = copy_groups(param_groups_);
  all.push_back(param_group);
  check_parameters(all);
  Optimizer::add_param_group(param_group);
  // The greedy partition of the earlier groups does not depend on later ones: only the new
  // group's parameters are assigned now.
  repartition();
  local_->add_param_group(groups_of(rank_).back());
  build_buckets();
}

}  // namespace ddp::detail
