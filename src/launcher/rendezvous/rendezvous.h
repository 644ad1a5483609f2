// Forming the job from one ddprun per node, through the store that one of them hosts: who is
// node 0..N-1, how many workers each runs, and that they agree on the flags that matter. The
// static rendezvous is here; c10d's rounds are in elastic_rendezvous.h.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"

namespace ddp {
class Store;
}

namespace ddp::launcher {

struct NodeInfo {
  int nproc = 1;
  std::string host;
  long pid = 0;
  int agent = 0;  // its agent id: the node rank (static), the arrival number (c10d)
};

struct Membership {
  int node_rank = 0;
  int nnodes = 1;
  std::vector<NodeInfo> nodes;  // by node rank
  int agent = 0;                // this node's agent id

  int world_size() const;
  int rank_offset() const;  // this node's first global rank
};

struct RendezvousSettings {
  RdzvBackend backend = RdzvBackend::Static;
  int min_nodes = 1;
  int max_nodes = 1;
  std::optional<int> node_rank;  // static
  int nproc = 1;
  bool coordinator = false;  // this ddprun hosts the store and decides the node count
  std::string agreed;        // flags every node must share (compared with the coordinator's)
  std::chrono::milliseconds join_timeout{600000};
  std::chrono::milliseconds last_call_timeout{30000};
  std::string store_address;  // "host:port", for messages
  std::string host;           // this machine
  long pid = 0;
  // c10d: how long a node's heartbeat may stand still before it is dropped, and how that was set
  // (for messages).
  std::chrono::milliseconds silence_limit{15000};
  std::string silence_settings;
};

// Joins a static job: claims settings.node_rank, checks the flags against node 0's, and waits for
// every node. Throws MismatchError (a node rank claimed twice, flags that differ from node 0's),
// TimeoutError (nodes missing after join_timeout, naming them), or whatever check_interrupt
// throws; before throwing it tells the others (the first attempt's end record), so that they stop
// at once instead of waiting for their join timeout.
Membership rendezvous(Store& store, const RendezvousSettings& settings, const std::function<void()>& check_interrupt);

// A node record in the store ("nproc\nhost\npid"), and back. decode throws ddp::Error.
std::string encode_node(const NodeInfo& node);
NodeInfo decode_node(const std::string& text, int agent);

// What every node must be started with, for messages.
std::string how_to_start(RdzvBackend backend);

// Tells the others that the agent `agent` (pid on host) could not join, through the first
// attempt's end record, and counts it as left. Never throws.
void tell_the_others(Store& store, int agent, const std::string& host, long pid, const std::string& why);

}  // namespace ddp::launcher
