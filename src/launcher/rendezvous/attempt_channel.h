// How the nodes' ddprun agents run one attempt in step, through the job's store:
//   - a start barrier (no node starts its workers before every node has stopped the last
//     attempt's; the coordinator then clears the store's lost-rank records of that attempt),
//   - the attempt's end record: the first node to report a failure (or the last node to report
//     success) writes it, and every node acts on that one record,
//   - leaving, so that the node hosting the store goes last.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/attempt_end.h"
#include "rendezvous/heartbeat.h"
#include "net/socket.h"
#include "rendezvous/rendezvous.h"

namespace ddp {
class Store;
}

namespace ddp::launcher {

// The attempt ended (as its record says) before this node could start it.
struct AttemptEndedEarly {
  AttemptEnd end;
};

class AttemptChannel {
 public:
  // `reporter`: this node's node_rank, host and agent_pid, for the records it writes.
  AttemptChannel(Store& store, const Membership& membership, bool coordinator, int attempt, AttemptEnd reporter);

  // Returns once every node reached this attempt; the coordinator then clears the lost-rank
  // records of worker ranks 0 to stale_ranks - 1 (the last attempt's). Throws AttemptEndedEarly
  // when the attempt's end was written meanwhile (a node was interrupted, or is gone: the
  // coordinator checks with `others`), TimeoutError naming the missing nodes after `timeout`, or
  // what check_interrupt throws.
  void start_barrier(std::chrono::milliseconds timeout, const std::function<void()>& check_interrupt, NodeWatch* others,
                     int stale_ranks);

  // Writes `end` as the attempt's end unless one is written already; returns the one that stands.
  AttemptEnd publish_end(const AttemptEnd& end);

  // This node's workers all exited 0; the last node to say so ends the attempt as a success.
  void report_success(const AttemptEnd& success);
  // How many nodes reported success so far.
  std::int64_t nodes_succeeded();

  const std::string& end_key() const { return end_key_; }

 private:
  Store& store_;
  Membership membership_;
  bool coordinator_;
  int attempt_;
  AttemptEnd reporter_;
  std::string end_key_;
};

// When one of the watched nodes' agents is gone, the AgentLost record that says so.
std::optional<AttemptEnd> find_lost_agent(NodeWatch& watch, Store& store, const AttemptEnd& reporter);

// Watches the attempt's end record on a connection of its own, on a background thread, every
// interval (no blocking wait: a store out of reach must not hold it up for long); fd() becomes
// readable when the end is known. `look` (the coordinator's) may end the attempt too: it
// is called every interval with the watcher's connection and returns the end to publish (a node
// gone, a node waiting to join). A broken connection to the store ends it (StoreLost: the node
// hosting the store is gone), and so does this node's heartbeat failing (the store out of reach).
class EndWatcher {
 public:
  struct Settings {
    std::string end_key;
    std::function<std::optional<AttemptEnd>(Store&)> look;  // may be empty
    const Heartbeat* heartbeat = nullptr;                   // may be null
    std::chrono::milliseconds interval{100};
    std::chrono::milliseconds request_timeout{60000};  // a store that does not answer in time is lost
    std::string store_address;                         // for messages
    AttemptEnd reporter;  // node_rank, host and agent_pid of this node, for records it writes
  };
  EndWatcher(std::shared_ptr<Store> store, Settings settings);
  ~EndWatcher();
  EndWatcher(const EndWatcher&) = delete;
  EndWatcher& operator=(const EndWatcher&) = delete;

  int fd() const { return event_.get(); }
  std::optional<AttemptEnd> end() const;

 private:
  void run();
  void finish(AttemptEnd end);

  std::shared_ptr<Store> store_;
  Settings settings_;
  detail::Fd event_;
  mutable std::mutex mutex_;
  std::optional<AttemptEnd> end_;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

// What a lost store means, for the records: "this node lost the job's store at ADDRESS: ...".
AttemptEnd store_lost_end(const AttemptEnd& reporter, const std::string& store_address, const std::string& error);

// After the job's last attempt: a node that does not host the store says it is leaving; the
// coordinator (which hosts it) waits up to `timeout` for the other agents (`others`, by agent id)
// to leave or vanish, so that the store outlives everyone who needs it. Never throws.
void leave_job(Store& store, const std::vector<int>& others, bool coordinator, std::chrono::milliseconds timeout);

}  // namespace ddp::launcher
