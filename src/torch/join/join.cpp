// ddp::join: the running join (the announcement of each iteration, the shadow loop of a rank
// that has run out of inputs, the post hooks) and the process's record of it.
#include "ddp/torch/join.h"

#include <ATen/ATen.h>

#include <mutex>

#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "join/announcement.h"
#include "join/running_join.h"
#include "util/log.h"
#include "util/strings.h"

namespace ddp::detail {

class JoinRun final : public JoinContext {
 public:
  JoinRun(const std::vector<JoinableRef>& joinables, JoinOptions options) : options_(options) {
    if (joinables.empty())
      throw InvalidArgument("ddp::join: the list of joinables is empty; pass the DDP model at least");
    for (std::size_t i = 0; i < joinables.size(); ++i) {
      Joinable* j = joinables[i].get();
      if (!j) throw InvalidArgument(cat("ddp::join: joinable ", i, " is null"));
      auto group = j->join_process_group();
      if (!group) throw InvalidArgument(cat("ddp::join: joinable ", i, " has no process group"));
      if (i == 0) {
        group_ = std::move(group);
        device_ = j->join_device();
      } else if (group != group_) {
        throw InvalidArgument(cat("ddp::join: joinable ", i,
                                  " communicates on another process group than joinable 0; "
                                  "the joinables of one join must share their group (as in PyTorch)"));
      }
      joinables_.push_back(j);
    }
    std::lock_guard lock(running_mutex());
    if (running()) throw InvalidArgument("ddp::join: a join is already running in this process; joins do not nest");
    for (std::size_t i = 0; i < joinables_.size(); ++i) {
      joinables_[i]->join_context_ = this;
      joinables_[i]->first_joinable_ = i == 0;
    }
    running() = this;
  }

  ~JoinRun() override {
    std::lock_guard lock(running_mutex());
    for (Joinable* j : joinables_) {
      j->join_context_ = nullptr;
      j->first_joinable_ = false;
    }
    running() = nullptr;
  }

  const JoinOptions& options() const override { return options_; }
  const std::shared_ptr<ProcessGroup>& process_group() const override { return group_; }
  std::vector<int> training_ranks() override { return current().training; }
  JoinIteration iteration() override { return current().iteration; }
  std::vector<int> last_joiners() const override {
    std::lock_guard lock(mutex_);
    if (!last_training_.empty()) return last_training_;
    std::vector<int> all;
    for (int r = 0; r < group_->size(); ++r) all.push_back(r);
    return all;
  }

  // The first joinable's notify: this rank still trains.
  void announce_training(const JoinIteration& iteration) {
    announce(true, iteration);
    if (!options_.throw_on_early_termination) return;
    const auto training = training_ranks();
    if (static_cast<int>(training.size()) < group_->size()) {
      throw Error(early_termination_message(training, group_->size()));
    }
  }

  // This rank's loop has returned: answer the others' iterations until every rank has joined.
  void shadow_until_all_joined() {
    shadowing_ = true;
    std::vector<std::unique_ptr<JoinHook>> hooks;
    for (Joinable* j : joinables_) hooks.push_back(j->join_hook(*this));
    bool last_joiner = true;
    for (int shadowed = 0;; ++shadowed) {
      announce(false, {});
      const auto training = training_ranks();
      if (training.empty()) break;
      if (options_.throw_on_early_termination) throw Error(early_termination_message(training, group_->size()));
      if (shadowed == kSkewWarning) {
        log(LogLevel::Warn, "ddp::join: rank ", group_->rank(), " has shadowed ", kSkewWarning,
            " iterations of the ranks still training (", join(training),
            "): the inputs are very uneven, which costs those ranks time in every iteration");
      }
      for (auto& hook : hooks) hook->main_hook();
      last_joiner = false;
    }
    for (auto& hook : hooks) hook->post_hook(last_joiner);
  }

  // The running join, or null; under running_mutex().
  static JoinRun*& running() {
    static JoinRun* run = nullptr;
    return run;
  }
  static std::mutex& running_mutex() {
    static std::mutex mutex;
    return mutex;
  }

  // Whether this rank's loop has returned (it answers the others now).
  bool shadowing() const { return shadowing_; }

  // Whether an announcement has been made in this join.
  bool announced() const {
    std::lock_guard lock(mutex_);
    return pending_.defined() || decoded_;
  }

 private:
  static constexpr int kSkewWarning = 1000;  // PyTorch's threshold for its uneven-inputs warning

  void announce(bool training, const JoinIteration& iteration) {
    // The previous announcement is read first, even if nobody asked: last_joiners() needs the
    // last one that had ranks training.
    if (pending()) current();
    const auto values = announcement_contribution(group_->rank(), group_->size(), training, iteration);
    at::Tensor t = at::tensor(values, at::kFloat).to(device_);
    auto work = all_reduce_async(t, ReduceOp::SUM, group_);
    std::lock_guard lock(mutex_);
    pending_ = t;
    work_ = std::move(work);
    decoded_ = false;
  }

  bool pending() const {
    std::lock_guard lock(mutex_);
    return work_ && !decoded_;
  }

  Announcement current() {
    std::lock_guard lock(mutex_);
    if (!decoded_) {
      if (!work_) throw Error("ddp::join: no iteration has been announced yet");
      work_->wait();
      at::Tensor sum = pending_.cpu().contiguous();
      const float* first = sum.data_ptr<float>();
      current_ = decode_announcement({first, first + sum.numel()}, group_->size());
      if (!current_.training.empty()) last_training_ = current_.training;
      pending_ = at::Tensor();
      work_.reset();
      decoded_ = true;
    }
    return current_;
  }

  JoinOptions options_;
  std::vector<Joinable*> joinables_;
  std::shared_ptr<ProcessGroup> group_;
  at::Device device_{at::kCPU};
  mutable std::mutex mutex_;  // the announcement: read on the autograd thread too
  at::Tensor pending_;
  std::shared_ptr<Work> work_;
  bool decoded_ = false;
  bool shadowing_ = false;  // set and read on the training thread only
  Announcement current_;
  std::vector<int> last_training_;
};

std::optional<std::vector<int>> members_still_training(const ProcessGroup& group) {
  JoinRun* run;
  {
    std::lock_guard lock(JoinRun::running_mutex());
    run = JoinRun::running();
  }
  if (!run || !run->options().enable) return std::nullopt;
  if (!run->announced()) {
    throw Error(
        "SyncBatchNorm ran inside ddp::join before any iteration was announced: put the "
        "DistributedDataParallel model that holds it first among the join's joinables (its forward "
        "announces each iteration), and call the layer from that model's forward");
  }
  const auto training = run->training_ranks();
  const auto& join_group = *run->process_group();
  if (static_cast<int>(training.size()) == join_group.size()) return std::nullopt;
  std::vector<int> members, join_members;
  for (int g = 0; g < group.size(); ++g) members.push_back(group.global_rank(g));
  for (int g = 0; g < join_group.size(); ++g) join_members.push_back(join_group.global_rank(g));
  return training_members(members, join_members, training);
}

}  // namespace ddp::detail

namespace ddp {

JoinContext* Joinable::notify_join_context(const JoinIteration& iteration) {
  auto* run = static_cast<detail::JoinRun*>(join_context_);
  if (!run || !run->options().enable) return nullptr;
  if (first_joinable_ && !run->shadowing()) run->announce_training(iteration);
  return run;
}

void join(const std::vector<JoinableRef>& joinables, const std::function<void()>& loop, JoinOptions options) {
  if (!options.enable) {
    loop();
    return;
  }
  detail::JoinRun run(joinables, options);
  loop();  // an exception propagates as it is (PyTorch's context manager does the same)
  run.shadow_until_all_joined();
}

}  // namespace ddp
