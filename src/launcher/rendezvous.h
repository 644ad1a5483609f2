// Forming the job from one ddprun per node, through the store that one of them hosts: who is
// node 0..N-1, how many workers each runs, and that they agree on the flags that matter.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "options.h"

namespace ddp {
class Store;
}

namespace ddp::launcher {

struct NodeInfo {
  int nproc = 1;
  std::string host;
  long pid = 0;
};

struct Membership {
  int node_rank = 0;
  int nnodes = 1;
  std::vector<NodeInfo> nodes;  // by node rank

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
};

// Joins the job. Static: claims settings.node_rank. c10d: takes the next node rank in arrival
// order; the coordinator closes the group at max_nodes, or at min_nodes or more once
// last_call_timeout passed without a new arrival. Throws MismatchError (a node rank claimed
// twice, flags that differ from node 0's, a node that arrived after the group was closed),
// TimeoutError (nodes missing after join_timeout, naming them), or whatever check_interrupt throws.
Membership rendezvous(Store& store, const RendezvousSettings& settings, const std::function<void()>& check_interrupt);

}  // namespace ddp::launcher
