// The collectives of a group that spans several hosts, some of them with two or more ranks: shared
// memory within each host (shm::HostCollectives), gloo between hosts (cpu_backend.h says when).
//
// Two shapes. Striped: every host has the same number L > 1 of ranks, and lane l (the ranks of
// local index l on every host) has its own gloo context, so all L ranks of a host use the network
// at once. Leaders: hosts of unequal sizes; one gloo context among the hosts' first ranks, which
// carry their host's data. In the striped shape lane 0 is the leaders, and collectives below the
// stripe threshold take the leaders' path there too (one connection's latency is their cost), as
// do all_gather and reduce_scatter below theirs, which by default is never reached: measured on
// emulated nodes, the lanes only paid where one stream cannot fill the link (docs/SHM.md).
//
//   all_reduce      striped: shared-memory reduce-scatter (each rank its share, 1/L of the buffer,
//                   reduced over the host), each lane all-reduces its share across the hosts,
//                   shared-memory all-gather of the shares. Leaders: host reduce to the first rank,
//                   all_reduce among the leaders, host broadcast.
//   broadcast       the root's host broadcasts in shared memory; striped, each lane carries its
//                   share to the other hosts, which gather the shares; leaders, the root's host's
//                   first rank carries it and the other hosts broadcast from theirs.
//   all_gather      striped: each lane all-gathers its ranks' inputs across the hosts, then the
//                   host all-gathers the lanes' results (every input crosses the network once per
//                   other host, where Gloo's ring over all ranks crosses it up to N - 1 times).
//                   Leaders: the host gathers its inputs, the leaders pass each host's run round
//                   a ring, and each leader broadcasts the whole result to its host.
//   reduce_scatter  striped: the host reduce-scatters so that rank l holds its lane's blocks
//                   reduced over the host, then each lane reduce-scatters them across the hosts in
//                   a ring (each host sends 1/H of its lane's blocks per step). Leaders: host
//                   reduce to the first rank, a ring reduce-scatter among the leaders in which
//                   each host's run is its ranks' blocks, and each leader broadcasts its run.
//
// Every op is cut in chunks (Tuning::stripe_chunk_bytes; all_gather and reduce_scatter cut each
// rank's block so that a chunk of the whole group's data fits in gather_chunk_bytes) and
// pipelined (pipeline.h): the network carries chunk k while shared memory works on chunks k + 1
// and k - 1 (all_gather: k - 1 gathered on the host and put in place; reduce_scatter: k + 1
// reordered and reduced).
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
    std::size_t stripe_bytes = 0;         // striped from this size up (smaller: the leaders' path)
    std::size_t chunk_bytes = 0;          // pipeline chunk (0: one chunk)
    std::size_t gather_chunk_bytes = 0;   // all_gather's and reduce_scatter's, of the group's data
    std::size_t gather_stripe_bytes = 0;  // theirs striped from this size of the group's data up
  };

  // `host`: this host's ranks, null on a host of one rank. `across`: this rank's lane (striped) or
  // the leaders' context (on leaders only; null elsewhere). Neither is owned.
  // `plan`: the group's placement, several hosts (striped when every host has the same L > 1 ranks).
  Hierarchy(shm::Plan plan, shm::HostCollectives* host, Backend* across, Thresholds thresholds);

  void all_reduce(Buffer data, ReduceOp op, Deadline deadline);
  void broadcast(Buffer data, int root, Deadline deadline);
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
  // run_pipelined over a block of `count` elements cut in `chunks`, with kSlots in flight, each
  // stage given chunk k, its first element and its length.
  template <typename First, typename Second, typename Third>
  void pipelined_pieces(std::size_t count, std::size_t chunks, First first, Second second, Third third);
  // The leaders' shape of the two.
  void leaders_all_gather(Buffer input, Buffer output, Deadline deadline);
  void leaders_reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline);
  // Calls f(piece, rank) for every group rank, its piece in a chunk's scratch being number
  // l * H + h for rank hosts[h][l] (ByLane: the striped shape's order) or first_[h] + l (ByHost).
  enum class Order { ByLane, ByHost };
  template <typename F>
  void for_each_piece(Order order, F f) const {
    const std::size_t hosts = plan_.hosts.size();
    for (std::size_t h = 0; h < hosts; ++h) {
      for (std::size_t l = 0; l < plan_.hosts[h].size(); ++l) {
        f(order == Order::ByLane ? l * hosts + h : first_[h] + l, static_cast<std::size_t>(plan_.hosts[h][l]));
      }
    }
  }
  // Each host's run of `length` elements per rank, for the leaders' rings.
  std::vector<std::size_t> host_counts(std::size_t length) const;
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
  std::vector<std::size_t> first_;       // per host: how many ranks the hosts before it have
  Storage scratch_;
};

// Group rank 0's thresholds as it publishes them to the others through the group's store, and
// back; decoding text that is not four sizes throws a MismatchError (ranks of different builds).
std::string encode_thresholds(const Hierarchy::Thresholds& thresholds);
Hierarchy::Thresholds decode_thresholds(const std::string& text);

// Rings among `group`'s ranks over its point-to-point sends, in place, for a context of their own
// (tags 0 to size() - 2). `data` holds size() segments one after the other, segment i of
// counts[i] elements (they may differ). ring_reduce_scatter leaves segment rank() reduced over
// every rank with `op` (which the caller has checked the group supports; the other segments are
// left partly reduced); ring_all_gather gives every rank every rank's segment. size() - 1 steps,
// each sending one segment to the next rank.
void ring_reduce_scatter(Backend& group, Buffer data, const std::vector<std::size_t>& counts, ReduceOp op,
                         Backend::Deadline deadline);
void ring_all_gather(Backend& group, Buffer data, const std::vector<std::size_t>& counts, Backend::Deadline deadline);

}  // namespace ddp::detail
