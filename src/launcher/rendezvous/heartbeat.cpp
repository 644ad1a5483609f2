#include "rendezvous/heartbeat.h"

#include "ddp/error.h"
#include "ddp/store.h"
#include "store/lost_ranks.h"
#include "rendezvous/store_keys.h"
#include "util/strings.h"

namespace ddp::launcher {

Heartbeat::Heartbeat(std::shared_ptr<Store> store, std::string key, std::chrono::milliseconds interval,
                     std::chrono::milliseconds limit)
    : store_(std::move(store)), key_(std::move(key)), interval_(interval), limit_(limit) {
  store_->set_timeout(limit);
  thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::optional<std::string> Heartbeat::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void Heartbeat::run() {
  auto last_beat = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    std::optional<std::string> failed;
    try {
      store_->add(key_, 1);
      last_beat = std::chrono::steady_clock::now();
    } catch (const Error& e) {
      failed = e.what();
    }
    if (failed) {
      // A connection that failed once is not trusted again: the next beat goes on a new one. The
      // node is given up only when no beat got through for as long as the coordinator waits for
      // one (a reset connection, a store host busy for a moment, is no reason to stop the job).
      try {
        auto fresh = store_->clone();
        fresh->set_timeout(limit_);
        store_ = std::move(fresh);
      } catch (const Error& e) {
        failed = e.what();
      }
    }
    lock.lock();
    if (failed && std::chrono::steady_clock::now() - last_beat >= limit_) {
      failure_ = detail::cat(*failed, " (no heartbeat got through for ", detail::format_duration(limit_), ")");
      return;
    }
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

std::optional<std::chrono::milliseconds> BeatWatch::silent(int agent, std::int64_t counter,
                                                           std::chrono::steady_clock::time_point now) {
  auto it = seen_.find(agent);
  if (it == seen_.end() || it->second.counter != counter) {
    seen_[agent] = {counter, now};
    return std::nullopt;
  }
  const auto still = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.since);
  if (still >= limit_) return still;
  return std::nullopt;
}

NodeWatch::NodeWatch(std::vector<Node> nodes, std::chrono::milliseconds silence_limit, std::string settings)
    : nodes_(std::move(nodes)), beats_(silence_limit), settings_(std::move(settings)) {}

std::vector<NodeWatch::Gone> NodeWatch::gone(Store& store) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Gone> gone;
  for (const Node& node : nodes_) {
    const std::string lost = detail::lost_rank_key(kAgentRankBase + node.agent);
    if (store.check({lost})) {
      gone.push_back(
          {node,
           detail::cat("vanished (", store.get(lost),
                       "): its connection to the job's store closed without a goodbye (it was killed, or its "
                       "machine or network went down)"),
           true});
    } else if (auto still = beats_.silent(node.agent, store.add(keys::beat(node.agent), 0), now)) {
      gone.push_back({node,
                      detail::cat("went silent: no heartbeat for ", detail::format_duration(*still), " (", settings_,
                                  "); its machine froze or its network is cut"),
                      false});
    }
  }
  return gone;
}

}  // namespace ddp::launcher
