// The collectives of the ranks on one host, through their shared segment (layout.h) with the step
// protocol of sync.h. Every op is a fixed sequence of steps computed from its arguments alone, so
// ranks that call the same op take the same steps.
//
//   all_reduce, reduce  small (Tuning::small_bytes): one step, every rank copies its buffer in and
//                       reduces all of them (reduce: the root only). Larger: the buffer is cut in
//                       one share per rank; per round of one chunk per share, step A copies the
//                       other ranks' chunks in and each rank reduces its own share's chunk from
//                       everyone's buffers straight into its output and its slot; step B copies
//                       the other shares' results out (reduce: to the root only).
//   reduce_scatter      step A of the above, rank r's share being its output.
//   broadcast           the root copies a slot-sized piece in per step, the others copy it out.
//   all_gather          every rank copies a piece of its input in per step, and everyone's out.
//   barrier             one step without data.
//   reduce_share,       the two halves of all_reduce's large path, for the collectives across hosts
//   gather_shares       (cpu/hierarchy.h): step A alone leaves each rank its own share reduced over
//                       the host, in place; gather_shares then copies every rank's share to all.
//
// Buffers alternate per step, so a rank runs up to one step ahead of the slowest one.
//
// A buffer in this rank's shared memory (allocate_shared, shared_buffers.h) skips the slots on
// the large path of all_reduce, reduce and reduce_share, and in gather_shares: its peers read its
// chunks where they are, in gather_shares its share too, and all_reduce's peers write the shares
// they reduced into it (for two ranks in the reduction's own pass: no copy back at all); an op
// where any rank's buffer is read so ends with one step more, after which no peer touches it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "ddp/types.h"
#include "shm/layout.h"
#include "shm/segment.h"
#include "shm/shared_buffers.h"
#include "shm/sync.h"
#include "shm/tuning.h"

namespace ddp::detail::shm {

class HostCollectives {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // `me`: this rank's index on the host; `names[i]`: the group rank of index i.
  HostCollectives(Segment segment, const Layout& layout, int me, std::vector<int> names, PeerWatch watch,
                  const Tuning& tuning);
  ~HostCollectives();

  int rank() const { return sync_.me(); }
  int size() const { return layout_.ranks; }
  // The creator's descriptor is no longer needed once every peer has mapped the segment.
  void close_descriptor() { segment_.close_fd(); }
  // Memory the host's peers read directly (SharedBuffers::allocate).
  std::shared_ptr<void> allocate_shared(std::size_t bytes) { return buffers_->allocate(bytes); }

  void all_reduce(Buffer data, ReduceOp op, Deadline deadline);
  // `root` is an index on this host. Other ranks' data is left as it was.
  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline);
  void reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline);
  void broadcast(Buffer data, int root, Deadline deadline);
  void all_gather(Buffer input, Buffer output, Deadline deadline);
  void barrier(Deadline deadline);

  // Rank `index`'s share of a buffer (share_of below).
  struct Share {
    std::size_t begin = 0, length = 0;
  };
  Share share(std::size_t count, DataType dtype, int index) const;
  // Leaves this rank's share of `data` reduced over the host's ranks; the rest of `data` is
  // unspecified until gather_shares.
  void reduce_share(Buffer data, ReduceOp op, Deadline deadline);
  // Copies every rank's share of `data` into everyone's `data`. `what` names the op in errors.
  void gather_shares(Buffer data, Deadline deadline, const char* what = "all_reduce");

  // Wakes and fails every peer's current and later waits (see Sync::abort).
  void abort() noexcept { sync_.abort(); }

 private:
  void reduce_to(Buffer data, ReduceOp op, int root, Deadline deadline, const char* what);  // root -1: every rank
  // The large path's rounds of one chunk per share, round j's piece of share q, and its step A:
  // the other shares' pieces copied in (unless `mine`, this buffer's place in shared memory, says
  // the peers read them where they are), srcs_ pointed at everyone's copy of this rank's piece,
  // and at round 0 bases_ at the peers' buffers where they are shared (null where not) and
  // shared_.
  std::size_t rounds(std::size_t count, DataType dtype) const;
  std::size_t piece(std::size_t count, DataType dtype, int q, std::size_t j, std::size_t& length) const;
  void step_a(Buffer data, std::uint64_t mine, std::size_t j, Deadline deadline, const char* what);
  // After waiting for `step`: bases_ at the peers' buffers that they named shared at it (null where
  // not), `bytes` long; whether any rank's, `mine` included, is shared (the same on every rank).
  bool find_peers(std::uint32_t step, std::uint64_t mine, std::size_t bytes, const char* what);
  // The lowest-numbered peer whose buffer of the current op is shared (bases_), or -1.
  int first_shared_peer() const;
  // Peer `peer`'s shared buffer (SharedBuffers::peer), errors naming the peer and the op.
  char* peer_buffer(int peer, std::uint64_t where, std::size_t bytes, const char* what);
  // The step after which no peer reads or writes this rank's shared buffer any more.
  void release_shared(Deadline deadline, const char* what);
  char* slot(int rank, std::uint32_t step) const { return layout_.slot(segment_.data(), rank, step & 1); }

  Segment segment_;
  Layout layout_;
  std::shared_ptr<SharedBuffers> buffers_;  // before sync_, which takes the peers' watch
  Sync sync_;
  std::size_t small_bytes_;
  std::vector<const void*> srcs_;  // scratch: one source per rank
  std::vector<char*> bases_;       // per rank, its shared buffer of the current op (null: none)
  bool shared_ = false;            // whether any rank's buffer of the current op is shared (the same on every rank)
};

// Rank `index`'s share of a buffer of `count` elements of `dtype` cut among `ranks`, as
// [begin, begin + length) in elements: whole 64-byte lines, one share per rank in rank order (the
// last ones may be short or empty). Pure: every rank computes every share alike.
HostCollectives::Share share_of(std::size_t count, DataType dtype, int ranks, int index);

}  // namespace ddp::detail::shm
