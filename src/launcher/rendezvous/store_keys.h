// The keys ddprun's agents keep in the job's store (all under "ddprun/", apart from the workers'
// keys), and waiting for them without becoming deaf to SIGINT/SIGTERM.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ddp {
class Store;
}

namespace ddp::launcher {

// An agent presents itself to the store as "rank" kAgentRankBase + its agent id (static: its node
// rank; c10d: its arrival number): above any worker rank, so that the store's lost-rank record
// (__ddp/lost/<rank>) tells when an agent vanished.
inline constexpr int kAgentRankBase = 2'000'000'000;

namespace keys {
inline const std::string kArrivals = "ddprun/rdzv/arrivals";  // c10d: counter of agents arrived (their ids)
inline const std::string kNnodes = "ddprun/rdzv/nnodes";      // the node count, once decided
inline const std::string kConfig = "ddprun/rdzv/config";      // flags every node must agree on
inline const std::string kLeft = "ddprun/left";               // agents that left after the end
inline std::string claim(int node_rank) { return "ddprun/rdzv/claim/" + std::to_string(node_rank); }
// Each agent's workers, host and pid: by node rank (static), by agent id (c10d).
inline std::string node(int agent) { return "ddprun/rdzv/node/" + std::to_string(agent); }
inline std::string attempt(int attempt, const std::string& what) {
  return "ddprun/attempt/" + std::to_string(attempt) + "/" + what;
}
inline std::string beat(int agent) { return "ddprun/beat/" + std::to_string(agent); }  // an agent's heartbeats
// Elastic rounds (c10d): round/<R>/join/<agent> (it asks to be in round R), round/<R>/record (the
// round as formed, written by the node hosting the store); the last formed round; the job's end.
inline std::string round(int round, const std::string& what) {
  return "ddprun/round/" + std::to_string(round) + "/" + what;
}
inline std::string round_join(int round, int agent) { return keys::round(round, "join/" + std::to_string(agent)); }
inline const std::string kLatestRound = "ddprun/round/latest";
inline const std::string kClosed = "ddprun/closed";
}  // namespace keys

// Waits until every key exists, in short slices, calling `check_interrupt` (which throws to
// abandon the wait) between them. Returns false when `deadline` passes first.
bool wait_for_keys(Store& store, const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline,
                   const std::function<void()>& check_interrupt);

}  // namespace ddp::launcher
