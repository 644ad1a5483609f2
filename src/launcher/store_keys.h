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

// An agent presents itself to the store as "rank" kAgentRankBase + node rank: above any worker
// rank, so that the store's lost-rank record (__ddp/lost/<rank>) tells when an agent vanished.
inline constexpr int kAgentRankBase = 2'000'000'000;

namespace keys {
inline const std::string kArrivals = "ddprun/rdzv/arrivals";  // c10d: counter of agents arrived
inline const std::string kNnodes = "ddprun/rdzv/nnodes";      // the node count, once decided
inline const std::string kConfig = "ddprun/rdzv/config";      // flags every node must agree on
inline const std::string kLeft = "ddprun/left";               // agents that left after the end
inline std::string claim(int node_rank) { return "ddprun/rdzv/claim/" + std::to_string(node_rank); }
inline std::string node(int node_rank) { return "ddprun/rdzv/node/" + std::to_string(node_rank); }
inline std::string attempt(int attempt, const std::string& what) {
  return "ddprun/attempt/" + std::to_string(attempt) + "/" + what;
}
}  // namespace keys

// Waits until every key exists, in short slices, calling `check_interrupt` (which throws to
// abandon the wait) between them. Returns false when `deadline` passes first.
bool wait_for_keys(Store& store, const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline,
                   const std::function<void()>& check_interrupt);

}  // namespace ddp::launcher
