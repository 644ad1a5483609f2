// An elastic job's rounds (c10d): each time the group re-forms (a node lost, a node arrived, a
// restart after a failure), the node hosting the store writes which nodes are in it and what
// changed, and every node reads that one record. Pure: the record, its text for the store, and
// the lines ddprun prints about it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace ddp::launcher {

struct MembershipChange {
  enum class Kind { Lost, Joined };
  Kind kind = Kind::Lost;
  int agent = -1;      // the agent's id (arrival order; stable across rounds)
  int node_rank = -1;  // Lost: its rank in the round it left; Joined: in the round it joined
  std::string host;
  long pid = 0;
  std::chrono::system_clock::time_point time;  // when the node hosting the store saw it
  std::string why;                             // Lost: what happened to it
  int nnodes = 0;                              // the group after the change: nodes and workers
  int workers = 0;
};

struct RoundRecord {
  int round = 0;
  bool formed = true;                     // false: the job could not go on (too few nodes): `failure` says why
  std::vector<NodeInfo> nodes;            // the members, by node rank
  int restarts_used = 0;                  // of --max_restarts, up to and including this round
  std::vector<MembershipChange> changes;  // against the last round
  std::string failure;

  int world_size() const;
  // This agent's node rank in the round, or -1 when it is not a member.
  int node_rank_of(int agent) const;
};

// Text for the store, and back. decode throws ddp::Error on text that encode did not write.
std::string encode(const RoundRecord& record);
RoundRecord decode_round_record(const std::string& text);

// "node 2 (host h3, pid 42) lost: its ddprun vanished ...; continuing with 2 nodes, 3 workers"
// or "node 2 (host h4, pid 7) joined; continuing with 3 nodes, 4 workers".
std::string describe(const MembershipChange& change);

// The same, prefixed with its time: a line of the final summary's history.
std::string history_line(const MembershipChange& change);

}  // namespace ddp::launcher
