#include "rendezvous/attempt_channel.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "ddp/error.h"
#include "ddp/store.h"
#include "store/lost_ranks.h"
#include "rendezvous/store_keys.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::optional<AttemptEnd> find_lost_agent(NodeWatch& watch, Store& store, const AttemptEnd& reporter) {
  const auto gone = watch.gone(store);
  if (gone.empty()) return std::nullopt;
  const NodeWatch::Gone& g = gone.front();
  AttemptEnd end = reporter;
  end.kind = AttemptEnd::Kind::AgentLost;
  end.lost_agent = g.node.agent;
  end.lost_why = "its ddprun " + g.why;
  end.what = cat("the ddprun of node ", g.node.node_rank, " (host ", g.node.host, ", pid ", g.node.pid, ") ", g.why,
                 g.vanished ? ". Its workers died with it." : ". Its workers are cut off from the job.");
  return end;
}

AttemptEnd store_lost_end(const AttemptEnd& reporter, const std::string& store_address, const std::string& error) {
  AttemptEnd end = reporter;
  end.kind = AttemptEnd::Kind::StoreLost;
  end.what = cat("this node lost the job's store at ", store_address,
                 ": the ddprun hosting it has exited or cannot be "
                 "reached (",
                 error,
                 "). The node hosting the store cannot be lost, even in an elastic job "
                 "(--nnodes=MIN:MAX), as with torchrun's c10d rendezvous: run it where it is least likely to go.");
  return end;
}

AttemptChannel::AttemptChannel(Store& store, const Membership& membership, bool coordinator, int attempt,
                               AttemptEnd reporter)
    : store_(store),
      membership_(membership),
      coordinator_(coordinator),
      attempt_(attempt),
      reporter_(std::move(reporter)),
      end_key_(keys::attempt(attempt, "end")) {}

void AttemptChannel::start_barrier(std::chrono::milliseconds timeout, const std::function<void()>& check_interrupt,
                                   NodeWatch* others, int stale_ranks) {
  const std::string ready = keys::attempt(attempt_, "ready");
  const std::string go = keys::attempt(attempt_, "go");
  const auto deadline = Clock::now() + timeout;
  store_.add(ready, 1);
  for (;;) {
    if (store_.check({end_key_})) throw AttemptEndedEarly{decode_attempt_end(store_.get(end_key_))};
    if (coordinator_ && others) {
      if (auto lost = find_lost_agent(*others, store_, reporter_)) throw AttemptEndedEarly{publish_end(*lost)};
    }
    if (coordinator_ && store_.add(ready, 0) >= membership_.nnodes) {
      // Every node stopped its workers of the last attempt: their lost-rank records are stale.
      for (int rank = 0; rank < stale_ranks; ++rank) store_.delete_key(detail::lost_rank_key(rank));
      store_.set(go, "1");
      return;
    }
    if (!coordinator_ && store_.check({go})) return;
    if (Clock::now() >= deadline) {
      const auto arrived = store_.add(ready, 0);
      throw TimeoutError(cat("only ", arrived, " of ", membership_.nnodes, " nodes reached attempt ", attempt_ + 1,
                             " within ", detail::format_duration(timeout),
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
  {
    std::lock_guard lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
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
  store_->set_timeout(settings_.request_timeout);
  for (;;) {
    try {
      if (store_->check({settings_.end_key})) {
        finish(decode_attempt_end(store_->get(settings_.end_key)));
        return;
      }
      if (settings_.heartbeat) {
        if (auto failure = settings_.heartbeat->failure()) {
          finish(store_lost_end(settings_.reporter, settings_.store_address, *failure));
          return;
        }
      }
      if (settings_.look) {
        if (auto end = settings_.look(*store_)) {
          store_->compare_set(settings_.end_key, "", encode(*end));  // the next look sees the end that stands
          continue;
        }
      }
    } catch (const Error& e) {
      finish(store_lost_end(settings_.reporter, settings_.store_address, e.what()));
      return;
    }
    std::unique_lock lock(stop_mutex_);
    if (stop_cv_.wait_for(lock, slice, [this] { return stop_; })) return;
  }
}

void leave_job(Store& store, const std::vector<int>& others, bool coordinator, std::chrono::milliseconds timeout) {
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
      for (int agent : others) {
        if (store.check({detail::lost_rank_key(kAgentRankBase + agent)})) ++gone;
      }
      if (gone >= static_cast<std::int64_t>(others.size())) return;
      std::this_thread::sleep_for(20ms);
    }
  } catch (const Error&) {
  }
}

}  // namespace ddp::launcher
