// Whether the other nodes' agents are still there. One that is killed closes its connection to
// the store, which records it (its lost-rank record). One whose machine froze or whose network was
// cut keeps its connection open (no FIN, no RST), so the store records nothing: each agent
// therefore beats (adds 1 to its own counter in the store every keep_alive_interval), and the node
// hosting the store drops one whose counter stood still for keep_alive_max_attempt beats, as
// torchrun's dynamic rendezvous does (keep_alive_interval 5 s, keep_alive_max_attempt 3).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ddp {
class Store;
}

namespace ddp::launcher {

// Beats on a connection of its own, on a background thread, from construction to destruction.
class Heartbeat {
 public:
  // `store`: a connection for this thread alone (its request timeout is set to `limit`). A beat
  // that fails is tried again on a new connection (store->clone()) at the next interval.
  Heartbeat(std::shared_ptr<Store> store, std::string key, std::chrono::milliseconds interval,
            std::chrono::milliseconds limit);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Why no beat could be delivered for `limit` (the store is gone or out of reach), once that is so.
  std::optional<std::string> failure() const;

 private:
  void run();

  std::shared_ptr<Store> store_;
  std::string key_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds limit_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::optional<std::string> failure_;
  std::thread thread_;
};

// Pure: which nodes' counters stood still for `limit`. Each look records a counter as read at
// `now`; a node is silent once its counter has not changed for `limit` since it was first seen.
class BeatWatch {
 public:
  explicit BeatWatch(std::chrono::milliseconds limit) : limit_(limit) {}
  // Records `counter` for `agent` at `now`; returns how long it has stood still when that is
  // `limit` or more.
  std::optional<std::chrono::milliseconds> silent(int agent, std::int64_t counter,
                                                  std::chrono::steady_clock::time_point now);

 private:
  struct Seen {
    std::int64_t counter;
    std::chrono::steady_clock::time_point since;
  };
  std::chrono::milliseconds limit_;
  std::map<int, Seen> seen_;
};

// Which of some nodes' agents are gone: vanished (its lost-rank record) or silent (its heartbeat
// stood still for the limit). Each call to gone() reads the store; the silence is measured over
// the calls of one NodeWatch, from its first.
class NodeWatch {
 public:
  struct Node {
    int agent = -1;
    int node_rank = -1;
    std::string host;
    long pid = 0;
  };
  struct Gone {
    Node node;
    std::string why;        // "vanished (pid 7 on h3): ...", "went silent: no heartbeat for ..."
    bool vanished = false;  // its connection closed (it is dead); else it went silent
  };
  // `settings`: how the limit is set, for the message ("keep_alive_interval=1.0 s x 3").
  NodeWatch(std::vector<Node> nodes, std::chrono::milliseconds silence_limit, std::string settings);
  // The nodes gone now, in the order given. Throws ddp::Error when the store cannot be read.
  std::vector<Gone> gone(Store& store);
  const std::vector<Node>& nodes() const { return nodes_; }

 private:
  std::vector<Node> nodes_;
  BeatWatch beats_;
  std::string settings_;
};

}  // namespace ddp::launcher
