#include "attempt_channel.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "ddp/error.h"
#include "ddp/store.h"
#include "store/lost_ranks.h"
#include "store_keys.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::optional<AttemptEnd> find_lost_agent(Store& store, const std::vector<int>& nodes, const AttemptEnd& reporter) {
  for (int node : nodes) {
    const std::string lost = detail::lost_rank_key(kAgentRankBase + node);
    if (!store.check({lost})) continue;
    AttemptEnd end = reporter;
    end.kind = AttemptEnd::Kind::AgentLost;
    end.what = cat("the ddprun of node ", node, " (", store.get(lost),
                   ") vanished: its connection to the job's store closed without a goodbye (it was killed, or its "
                   "machine or network went down). Its workers died with it.");
    return end;
  }
  return std::nullopt;
}

AttemptChannel::AttemptChannel(Store& store, const Membership& membership, bool coordinator, int attempt,
                               AttemptEnd reporter)
    : store_(store),
      membership_(membership),
      coordinator_(coordinator),
      attempt_(attempt),
      reporter_(std::move(reporter)),
      end_key_(keys::attempt(attempt, "end")) {}

void AttemptChannel::start_barrier(std::chrono::milliseconds timeout, const std::function<void()>& check_interrupt) {
  const std::string ready = keys::attempt(attempt_, "ready");
  const std::string go = keys::attempt(attempt_, "go");
  const auto deadline = Clock::now() + timeout;
  store_.add(ready, 1);
  for (;;) {
    if (store_.check({end_key_})) throw AttemptEndedEarly{decode_attempt_end(store_.get(end_key_))};
    if (coordinator_) {
      std::vector<int> others;
      for (int n = 0; n < membership_.nnodes; ++n) {
        if (n != membership_.node_rank) others.push_back(n);
      }
      if (auto lost = find_lost_agent(store_, others, reporter_)) throw AttemptEndedEarly{publish_end(*lost)};
    }
    if (coordinator_ && store_.add(ready, 0) >= membership_.nnodes) {
      // Every node stopped its workers of the last attempt: their lost-rank records are stale.
      for (int rank = 0; rank < membership_.world_size(); ++rank) store_.delete_key(detail::lost_rank_key(rank));
      store_.set(go, "1");
      return;
    }
    if (!coordinator_ && store_.check({go})) return;
    if (Clock::now() >= deadline) {
      const auto arrived = store_.add(ready, 0);
      throw TimeoutError(cat("only ", arrived, " of ", membership_.nnodes, " nodes reached attempt ",
                             attempt_ + 1, " within ", detail::format_duration(timeout),
                             ". A node's ddprun is stuck or gone; check the other nodes' output."));
    }
    wait_for_keys(store_, {go}, std::min(deadline, Clock::now() + 100ms), check_interrupt);
  }
}

AttemptEnd AttemptChannel::publish_end(const AttemptEnd& end) {
  const std::string mine = encode(end);
  const std::string standing = store_.compare_set(end_key_, "", mine);
  return standing == mine ? end : decode_attempt_end(standing);
}

std::int64_t AttemptChannel::nodes_succeeded() { return store_.add(keys::attempt(attempt_, "succeeded"), 0); }

void AttemptChannel::report_success(const AttemptEnd& success) {
  if (store_.add(keys::attempt(attempt_, "succeeded"), 1) >= membership_.nnodes) publish_end(success);
}

EndWatcher::EndWatcher(std::shared_ptr<Store> store, Settings settings)
    : store_(std::move(store)), settings_(std::move(settings)) {
  event_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_) throw IOError("cannot create an eventfd");
  thread_ = std::thread([this] { run(); });
}

EndWatcher::~EndWatcher() {
  stop_.store(true);
  thread_.join();
}

std::optional<AttemptEnd> EndWatcher::end() const {
  std::lock_guard lock(mutex_);
  return end_;
}

void EndWatcher::finish(AttemptEnd end) {
  {
    std::lock_guard lock(mutex_);
    end_ = std::move(end);
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(event_.get(), &one, sizeof one);
}

void EndWatcher::run() {
  const auto slice = std::clamp<std::chrono::milliseconds>(settings_.interval, 10ms, 1000ms);
  while (!stop_.load()) {
    try {
      try {
        store_->wait({settings_.end_key}, slice);
        finish(decode_attempt_end(store_->get(settings_.end_key)));
        return;
      } catch (const TimeoutError&) {
      }
      if (auto lost = find_lost_agent(*store_, settings_.watched_nodes, settings_.reporter)) {
        store_->compare_set(settings_.end_key, "", encode(*lost));  // the next wait sees the end that stands
      }
    } catch (const Error& e) {
      AttemptEnd end = settings_.reporter;
      end.kind = AttemptEnd::Kind::StoreLost;
      end.what = cat("this node lost the job's store at ", settings_.store_address,
                     ": the ddprun hosting it (the first node's) has exited or cannot be reached (", e.what(), ")");
      finish(std::move(end));
      return;
    }
  }
}

void leave_job(Store& store, const Membership& membership, bool coordinator, std::chrono::milliseconds timeout) {
  try {
    // Bounded even when the store cannot be reached (a cut network): a leaving node must not hang.
    store.set_timeout(timeout);
    if (!coordinator) {
      store.add(keys::kLeft, 1);
      return;
    }
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      std::int64_t gone = store.add(keys::kLeft, 0);
      for (int node = 0; node < membership.nnodes; ++node) {
        if (node != membership.node_rank && store.check({detail::lost_rank_key(kAgentRankBase + node)})) ++gone;
      }
      if (gone >= membership.nnodes - 1) return;
      std::this_thread::sleep_for(20ms);
    }
  } catch (const Error&) {
  }
}

}  // namespace ddp::launcher
