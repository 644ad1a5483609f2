// The collectives of a group that spans several hosts, some of them with two or more ranks: shared
// memory within each host (shm::HostCollectives), gloo between hosts (cpu_backend.h says when).
//
// Two shapes. Striped: every host has the same number L > 1 of ranks, and lane l (the ranks of
// local index l on every host) has its own gloo context, so all L ranks of a host use the network
// at once. Leaders: hosts of unequal sizes; one gloo context among the hosts' first ranks, which
// carry their host's data. In the striped shape lane 0 is the leaders, and collectives below the
// stripe threshold take the leaders' path there too (one connection's latency is their cost).
//
//   all_reduce      striped: shared-memory reduce-scatter (each rank its share, 1/L of the buffer,
//                   reduced over the host), each lane all-reduces its share across the hosts,
//                   shared-memory all-gather of the shares. Leaders: host reduce to the first rank,
//                   all_reduce among the leaders, host broadcast.
//   broadcast       the root's host broadcasts in shared memory; striped, each lane carries its
//                   share to the other hosts, which gather the shares; leaders, the root's host's
//                   first rank carries it and the other hosts broadcast from theirs.
//   all_gather      striped only: each lane all-gathers its ranks' inputs across the hosts, then
//                   the host all-gathers the lanes' results (every input crosses the network once
//                   per other host, where Gloo's ring over all ranks crosses it up to N - 1 times).
//   reduce_scatter  striped only: the host reduce-scatters so that rank l holds its lane's blocks
//                   reduced over the host, then each lane reduce-scatters them across the hosts in
//                   a ring (each host sends 1/H of its lane's blocks per step).
//
// Every op is cut in chunks (Tuning::stripe_chunk_bytes; all_gather and reduce_scatter cut each
// rank's block so that a chunk of the whole group's data fits in gather_chunk_bytes) and pipelined (pipeline.h): the
// network carries chunk k while shared memory works on chunks k + 1 and k - 1 (all_gather: k - 1
// gathered on the host and put in place; reduce_scatter: k + 1 reordered and reduced).
// Every rank takes the same path and the same chunks for the same arguments: the shape comes from
// the plan every rank derives alike, the thresholds from group rank 0.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ddp/backend.h"
#include "shm/host_collectives.h"
#include "shm/topology.h"

namespace ddp::detail {

class Hierarchy {
 public:
  using Deadline = Backend::Deadline;

  struct Thresholds {
    std::size_t stripe_bytes = 0;  // striped from this size up (smaller: the leaders' path)
    std::size_t chunk_bytes = 0;   // pipeline chunk (0: one chunk)
    std::size_t gather_chunk_bytes = 0;  // all_gather's and reduce_scatter's, of the group's data
  };

  // `host`: this host's ranks, null on a host of one rank. `across`: this rank's lane (striped) or
  // the leaders' context (on leaders only; null elsewhere). Neither is owned.
  // `plan`: the group's placement, several hosts (striped when every host has the same L > 1 ranks).
  Hierarchy(shm::Plan plan, shm::HostCollectives* host, Backend* across, Thresholds thresholds);

  void all_reduce(Buffer data, ReduceOp op, Deadline deadline);
  void broadcast(Buffer data, int root, Deadline deadline);
  // Striped shape only (gathers() says so); else gloo over the whole group does them.
  bool gathers() const { return striped_; }
  void all_gather(Buffer input, Buffer output, Deadline deadline);
  void reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline);

 private:
  bool stripes(const Buffer& data) const { return striped_ && data.bytes() >= thresholds_.stripe_bytes; }
  // Runs first/second/third over `data`'s chunks (pipeline.h), each stage given its chunk.
  template <typename First, typename Second, typename Third>
  void pipelined(const Buffer& data, First first, Second second, Third third);
  // all_gather's and reduce_scatter's chunks of a block of `count` elements: each chunk moves at
  // most gather_chunk_bytes of the whole group's data, and there is always one.
  std::size_t gather_chunks(std::size_t count, DataType dtype) const;
  // Their scratch: chunk k in slot k % kSlots, so that the link fills one slot while the host
  // empties the other.
  static constexpr std::size_t kSlots = 2;
  struct Storage {
    std::unique_ptr<char[]> data;
    std::size_t bytes = 0;
  };
  // `bytes` of scratch: scratch_, kept for the next op, when it is at most 3 chunks; else `once`.
  char* scratch(std::size_t bytes, Storage& once);

  shm::Plan plan_;
  bool striped_;
  shm::HostCollectives* host_;
  Backend* across_;
  Thresholds thresholds_;
  std::vector<int> host_of_, local_of_;  // per group rank
  Storage scratch_;
};

// Group rank 0's thresholds as it publishes them to the others through the group's store, and
// back; decoding text that is not three sizes throws a MismatchError (ranks of different builds).
std::string encode_thresholds(const Hierarchy::Thresholds& thresholds);
Hierarchy::Thresholds decode_thresholds(const std::string& text);

// A reduce-scatter among `group`'s ranks in a ring over its point-to-point sends (size() - 1 steps,
// each sending one block to the next rank): `input` holds size() blocks of output.count elements,
// rank r gets every rank's block r reduced with `op` (which the caller has checked the group
// supports). Point-to-point tags 0 to size() - 2 are used: only for a context of its own.
void ring_reduce_scatter(Backend& group, Buffer input, Buffer output, ReduceOp op, Backend::Deadline deadline);

}  // namespace ddp::detail
