#include "shm/host_collectives.h"

#include <sched.h>

#include <algorithm>

#include "ddp/error.h"
#include "shm/kernels.h"
#include "shm/op_signature.h"
#include "util/buffers.h"
#include "util/error_kind.h"
#include "util/strings.h"

namespace ddp::detail::shm {
namespace {

// More ranks on this host than CPUs this process may run on.
bool oversubscribed(int ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return false;
  return ranks > CPU_COUNT(&set);
}

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

std::vector<pid_t> pids_of(const PeerWatch& watch, int ranks) {
  std::vector<pid_t> pids;
  for (int i = 0; i < ranks; ++i) pids.push_back(watch.pid(i));
  return pids;
}

}  // namespace

HostCollectives::HostCollectives(Segment segment, const Layout& layout, int me, std::vector<int> names, PeerWatch watch,
                                 const Tuning& tuning)
    : segment_(std::move(segment)),
      layout_(layout),
      buffers_(std::make_shared<SharedBuffers>(segment_.data(), layout_, me, pids_of(watch, layout.ranks))),
      sync_(segment_.data(), layout_, me, std::move(names), std::move(watch), tuning.spin,
            oversubscribed(layout.ranks)),
      small_bytes_(tuning.small_bytes),
      srcs_(static_cast<std::size_t>(layout.ranks)),
      bases_(static_cast<std::size_t>(layout.ranks)) {}

// Allocations that outlive the group stay ordinary memory; the peers' mappings go with it.
HostCollectives::~HostCollectives() { buffers_->detach(); }

void HostCollectives::all_reduce(Buffer data, ReduceOp op, Deadline deadline) {
  reduce_to(data, op, -1, deadline, "all_reduce");
}

void HostCollectives::reduce(Buffer data, ReduceOp op, int root, Deadline deadline) {
  reduce_to(data, op, root, deadline, "reduce");
}

void HostCollectives::reduce_to(Buffer data, ReduceOp op, int root, Deadline deadline, const char* what) {
  const int n = size(), me = rank();
  const std::size_t e = element_size(data.dtype), count = data.count;
  char* base = static_cast<char*>(data.data);
  const bool gets_result = root < 0 || root == me;
  sync_.begin_op(op_signature(root < 0 ? OpKind::AllReduce : OpKind::Reduce, data.dtype, count, op, root));

  if (count * e <= layout_.slot_bytes && count * e * static_cast<std::size_t>(n - 1) <= small_bytes_) {
    // One step: everyone's whole buffer, reduced where needed.
    const std::uint32_t s = sync_.next_step();
    sync_.ready_to_write(s, deadline, what);
    copy_bytes(slot(me, s), base, count * e);
    sync_.publish(s, deadline, what);
    if (!gets_result) return;
    sync_.wait_all(s, deadline, what);
    for (int p = 0; p < n; ++p) srcs_[p] = p == me ? base : slot(p, s);
    shm::reduce(base, nullptr, srcs_.data(), n, count, data.dtype, op);
    return;
  }

  const std::size_t rounds = this->rounds(count, data.dtype);
  const std::uint64_t mine = buffers_->locate(base, count * e);
  // Whether this rank's reduced share goes out through its slot: all_reduce's peers read a shared
  // buffer's where it is; reduce's root reads every other rank's from its slot.
  const bool through_slot = root < 0 ? !mine : root != me;
  for (std::size_t j = 0; j < rounds; ++j) {
    // Step A: the other shares' chunks in, this share's chunk's sources (srcs_) from everyone's.
    step_a(data, mine, j, deadline, what);
    std::size_t length;
    const std::size_t begin = piece(count, data.dtype, me, j, length);
    // Step B: the reduced chunk goes out through this rank's other buffer (everyone is past step
    // A - 1, so that buffer is free) and, where this rank keeps the result, into its own data;
    // an all_reduce's peers read a shared buffer's result where it is, and a peer whose own
    // buffer is shared gets it written there, by the kernel's pass for the first such peer.
    const std::uint32_t b = sync_.next_step();
    char* out = through_slot ? slot(me, b) + me * layout_.chunk : nullptr;
    const int direct = root < 0 && !out ? first_shared_peer() : -1;
    if (direct >= 0) out = bases_[direct] + begin * e;
    if (length > 0) shm::reduce(gets_result ? base + begin * e : nullptr, out, srcs_.data(), n, length, data.dtype, op);
    if (root < 0 && length > 0) {
      for (int q = 0; q < n; ++q) {
        if (q != me && q != direct && bases_[q]) copy_bytes(bases_[q] + begin * e, base + begin * e, length * e);
      }
    }
    sync_.publish(b, deadline, what);
    if (!gets_result) continue;
    sync_.wait_all(b, deadline, what);
    if (root < 0 && mine) continue;  // every peer wrote its reduced piece into this buffer
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      std::size_t len;
      const std::size_t at = piece(count, data.dtype, q, j, len);
      const char* from = root < 0 && bases_[q] ? bases_[q] + at * e : slot(q, b) + q * layout_.chunk;
      copy_bytes(base + at * e, from, len * e);
    }
  }
  if (shared_) release_shared(deadline, what);
}

HostCollectives::Share share_of(std::size_t count, DataType dtype, int ranks, int index) {
  const std::size_t align = std::max<std::size_t>(1, 64 / element_size(dtype));
  const std::size_t share = ceil_div(ceil_div(count, static_cast<std::size_t>(ranks)), align) * align;
  const std::size_t begin = std::min(count, static_cast<std::size_t>(index) * share);
  return {begin, std::min(count, begin + share) - begin};
}

HostCollectives::Share HostCollectives::share(std::size_t count, DataType dtype, int index) const {
  return share_of(count, dtype, size(), index);
}

std::size_t HostCollectives::rounds(std::size_t count, DataType dtype) const {
  return ceil_div(share(count, dtype, 0).length, layout_.chunk / element_size(dtype));
}

std::size_t HostCollectives::piece(std::size_t count, DataType dtype, int q, std::size_t j, std::size_t& length) const {
  const Share s = share(count, dtype, q);
  const std::size_t per_chunk = layout_.chunk / element_size(dtype);
  const std::size_t begin = std::min(s.begin + s.length, s.begin + j * per_chunk);
  length = std::min(s.begin + s.length, begin + per_chunk) - begin;
  return begin;
}

void HostCollectives::step_a(Buffer data, std::uint64_t mine, std::size_t j, Deadline deadline, const char* what) {
  const int n = size(), me = rank();
  const std::size_t e = element_size(data.dtype);
  char* base = static_cast<char*>(data.data);
  const std::uint32_t a = sync_.next_step();
  sync_.ready_to_write(a, deadline, what);
  layout_.control(segment_.data(), me)->where[a & 1].store(mine, std::memory_order_relaxed);
  for (int q = 0; q < n && !mine; ++q) {
    if (q == me) continue;
    std::size_t length;
    const std::size_t begin = piece(data.count, data.dtype, q, j, length);
    copy_bytes(slot(me, a) + q * layout_.chunk, base + begin * e, length * e);
  }
  sync_.publish(a, deadline, what);
  sync_.wait_all(a, deadline, what);
  if (j == 0) shared_ = find_peers(a, mine, data.bytes(), what);
  std::size_t length;
  const std::size_t begin = piece(data.count, data.dtype, me, j, length);
  for (int p = 0; p < n; ++p) {
    srcs_[p] = p == me ? base + begin * e : bases_[p] ? bases_[p] + begin * e : slot(p, a) + me * layout_.chunk;
  }
}

int HostCollectives::first_shared_peer() const {
  for (int q = 0; q < size(); ++q) {
    if (q != rank() && bases_[q]) return q;
  }
  return -1;
}

bool HostCollectives::find_peers(std::uint32_t step, std::uint64_t mine, std::size_t bytes, const char* what) {
  bool shared = mine != 0;
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    buffers_->drop_stale(p);
    const std::uint64_t where = layout_.control(segment_.data(), p)->where[step & 1].load(std::memory_order_relaxed);
    bases_[p] = where ? peer_buffer(p, where, bytes, what) : nullptr;
    shared = shared || where;
  }
  return shared;
}

char* HostCollectives::peer_buffer(int peer, std::uint64_t where, std::size_t bytes, const char* what) {
  try {
    return buffers_->peer(peer, where, bytes);
  } catch (const Error&) {
    // A peer killed after publishing its step takes its memory with it (its files close a moment
    // before its exit shows: wait for that, rather than blame a live peer).
    if (sync_.exits_within(peer, std::chrono::seconds(1))) {
      throw PeerLostError(cat("shared-memory ", what, ": ", sync_.describe(peer), " exited during it"));
    }
    rethrow_with_context(cat("shared-memory ", what, ": ", sync_.describe(peer)));
  }
}

void HostCollectives::release_shared(Deadline deadline, const char* what) {
  const std::uint32_t s = sync_.next_step();
  sync_.publish(s, deadline, what);
  sync_.wait_all(s, deadline, what);
  // A peer that published this step and then gave up (its wait for another timed out) may be
  // writing its buffer again: what was read from it cannot be trusted.
  sync_.check_abort(what);
}

void HostCollectives::reduce_share(Buffer data, ReduceOp op, Deadline deadline) {
  const std::size_t e = element_size(data.dtype), rounds = this->rounds(data.count, data.dtype);
  char* base = static_cast<char*>(data.data);
  sync_.begin_op(op_signature(OpKind::ReduceShare, data.dtype, data.count, op));
  const std::uint64_t mine = buffers_->locate(base, data.count * e);
  for (std::size_t j = 0; j < rounds; ++j) {
    step_a(data, mine, j, deadline, "all_reduce");
    std::size_t length;
    const std::size_t begin = piece(data.count, data.dtype, rank(), j, length);
    if (length > 0) shm::reduce(base + begin * e, nullptr, srcs_.data(), size(), length, data.dtype, op);
  }
  if (shared_) release_shared(deadline, "all_reduce");
}

void HostCollectives::gather_shares(Buffer data, Deadline deadline, const char* what) {
  const int n = size(), me = rank();
  const std::size_t e = element_size(data.dtype), rounds = this->rounds(data.count, data.dtype);
  char* base = static_cast<char*>(data.data);
  sync_.begin_op(op_signature(OpKind::GatherShares, data.dtype, data.count));
  // A shared buffer's share is read where it is, not copied into the slot first.
  const std::uint64_t mine = buffers_->locate(base, data.bytes());
  for (std::size_t j = 0; j < rounds; ++j) {
    const std::uint32_t s = sync_.next_step();
    sync_.ready_to_write(s, deadline, what);
    layout_.control(segment_.data(), me)->where[s & 1].store(mine, std::memory_order_relaxed);
    std::size_t length;
    const std::size_t begin = piece(data.count, data.dtype, me, j, length);
    if (!mine) copy_bytes(slot(me, s), base + begin * e, length * e);
    sync_.publish(s, deadline, what);
    sync_.wait_all(s, deadline, what);
    if (j == 0) shared_ = find_peers(s, mine, data.bytes(), what);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      const std::size_t at = piece(data.count, data.dtype, q, j, length);
      copy_bytes(base + at * e, bases_[q] ? bases_[q] + at * e : slot(q, s), length * e);
    }
  }
  if (shared_) release_shared(deadline, what);
}

void HostCollectives::reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) {
  const int n = size(), me = rank();
  const std::size_t e = element_size(input.dtype), count = output.count;
  const char* in = static_cast<const char*>(input.data);
  char* out = static_cast<char*>(output.data);
  const std::size_t per_chunk = layout_.chunk / e;
  const std::size_t rounds = ceil_div(count, per_chunk);
  sync_.begin_op(op_signature(OpKind::ReduceScatter, input.dtype, count, op));
  for (std::size_t j = 0; j < rounds; ++j) {
    const std::size_t begin = j * per_chunk, length = std::min(per_chunk, count - begin);
    const std::uint32_t s = sync_.next_step();
    sync_.ready_to_write(s, deadline, "reduce_scatter");
    char* mine = slot(me, s);
    for (int q = 0; q < n; ++q) {
      if (q != me) copy_bytes(mine + q * layout_.chunk, in + (q * count + begin) * e, length * e);
    }
    sync_.publish(s, deadline, "reduce_scatter");
    sync_.wait_all(s, deadline, "reduce_scatter");
    for (int p = 0; p < n; ++p) srcs_[p] = p == me ? in + (me * count + begin) * e : slot(p, s) + me * layout_.chunk;
    shm::reduce(out + begin * e, nullptr, srcs_.data(), n, length, input.dtype, op);
  }
}

void HostCollectives::broadcast(Buffer data, int root, Deadline deadline) {
  const int me = rank();
  const std::size_t bytes = data.bytes(), per = layout_.slot_bytes;
  char* base = static_cast<char*>(data.data);
  sync_.begin_op(op_signature(OpKind::Broadcast, DataType::UInt8, bytes, ReduceOp::SUM, root));
  for (std::size_t off = 0; off < bytes; off += per) {
    const std::size_t length = std::min(per, bytes - off);
    const std::uint32_t s = sync_.next_step();
    if (me == root) {
      sync_.ready_to_write(s, deadline, "broadcast");
      copy_bytes(slot(me, s), base + off, length);
      sync_.publish(s, deadline, "broadcast");
    } else {
      sync_.wait_for(root, s, deadline, "broadcast");
      copy_bytes(base + off, slot(root, s), length);
      sync_.publish(s, deadline, "broadcast");
    }
  }
}

void HostCollectives::all_gather(Buffer input, Buffer output, Deadline deadline) {
  const int n = size(), me = rank();
  const std::size_t bytes = input.bytes(), per = layout_.slot_bytes;
  const char* in = static_cast<const char*>(input.data);
  char* out = static_cast<char*>(output.data);
  sync_.begin_op(op_signature(OpKind::AllGather, DataType::UInt8, bytes));
  for (std::size_t off = 0; off < bytes; off += per) {
    const std::size_t length = std::min(per, bytes - off);
    const std::uint32_t s = sync_.next_step();
    sync_.ready_to_write(s, deadline, "all_gather");
    copy_bytes(slot(me, s), in + off, length);
    sync_.publish(s, deadline, "all_gather");
    copy_bytes(out + me * bytes + off, in + off, length);  // nothing when gathering in place
    sync_.wait_all(s, deadline, "all_gather");
    for (int p = 0; p < n; ++p) {
      if (p != me) copy_bytes(out + p * bytes + off, slot(p, s), length);
    }
  }
}

void HostCollectives::barrier(Deadline deadline) {
  sync_.begin_op(op_signature(OpKind::Barrier, DataType::UInt8, 0));
  const std::uint32_t s = sync_.next_step();
  sync_.publish(s, deadline, "barrier");
  sync_.wait_all(s, deadline, "barrier");
}

}  // namespace ddp::detail::shm
