// What a host's shared-memory segment holds, and where. One segment per group per host:
//
//   Header                      magic, nonce, size, chunk; the abort word
//   Control[ranks]              per rank, on its own 128-byte line: the step counter (a futex
//                               word) and how many peers sleep on it
//   Region[ranks][kRegions]     per rank, the memory it shares beyond the segment
//                               (shared_buffers.h): which descriptor, how long, which generation
//   slots[ranks][2]             per rank, two buffers of ranks * chunk bytes, used by
//                               alternate steps (see sync.h for the protocol)
//
// Only lock-free, address-free atomics live here: the segment is mapped at different addresses
// in different processes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ddp::detail::shm {

inline constexpr std::uint64_t kMagic = 0x326d68732d707064;  // "ddp-shm2", little-endian
inline constexpr std::size_t kPage = 4096;

static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "futex words must be lock-free");
static_assert(sizeof(std::atomic<std::uint32_t>) == 4, "futex words are 32 bits");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "op signatures must be lock-free");

struct Header {
  std::uint64_t magic;
  std::uint64_t nonce;  // random, published with the segment's address: proves we mapped the right one
  std::uint32_t ranks;
  std::uint32_t chunk_bytes;
  std::uint64_t total_bytes;
  alignas(64) std::atomic<std::uint32_t> aborted_by;  // 0, or 1 + the index of the first rank that aborted
};

struct alignas(128) Control {
  std::atomic<std::uint32_t> step;      // the last step this rank published (futex word)
  std::atomic<std::uint32_t> sleepers;  // peers asleep (or going to sleep) on `step`
  // Per step parity, what the step is: an op's signature at its first step (op_signature.h), 0
  // at its later steps. Written before the step is published, read by the peers that wait for it.
  std::atomic<std::uint64_t> op[2];
  // Per step parity, where this rank's buffer of the current op lies in its shared regions
  // (SharedBuffers::locate; 0: not in one, its data goes through the slots). Written before the
  // step is published.
  std::atomic<std::uint64_t> where[2];
  // Bumped by this rank whenever its row of the region table changes, so that a peer knows when to
  // look for mappings it holds of memory since freed.
  std::atomic<std::uint32_t> regions;
};

// One memory region a rank shares with its host (shared_buffers.h). `generation` is 0 while the
// entry is free and changes whenever it is reused, so a peer knows when its mapping is stale.
struct Region {
  std::atomic<std::uint32_t> generation;
  std::atomic<std::int32_t> fd;  // in the owner's descriptor table, opened by peers through /proc
  std::atomic<std::uint64_t> bytes;
};
inline constexpr std::size_t kRegions = 256;  // per rank

inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Offsets within a segment for `ranks` ranks and a chunk of `chunk` bytes.
struct Layout {
  int ranks = 0;
  std::size_t chunk = 0;       // bytes per rank per step
  std::size_t slot_bytes = 0;  // one buffer of a rank: ranks * chunk
  std::size_t control_offset = 0;
  std::size_t regions_offset = 0;
  std::size_t data_offset = 0;
  std::size_t total_bytes = 0;

  static Layout make(int ranks, std::size_t chunk) {
    Layout l;
    l.ranks = ranks;
    l.chunk = chunk;
    l.slot_bytes = static_cast<std::size_t>(ranks) * chunk;
    l.control_offset = round_up(sizeof(Header), 128);
    l.regions_offset = l.control_offset + sizeof(Control) * static_cast<std::size_t>(ranks);
    l.data_offset = round_up(l.regions_offset + sizeof(Region) * kRegions * static_cast<std::size_t>(ranks), kPage);
    l.total_bytes = l.data_offset + l.slot_bytes * 2 * static_cast<std::size_t>(ranks);
    return l;
  }

  Header* header(void* base) const { return static_cast<Header*>(base); }
  Control* control(void* base, int rank) const {
    return reinterpret_cast<Control*>(static_cast<char*>(base) + control_offset) + rank;
  }
  Region* region(void* base, int rank, std::size_t index) const {
    return reinterpret_cast<Region*>(static_cast<char*>(base) + regions_offset) +
           static_cast<std::size_t>(rank) * kRegions + index;
  }
  // Buffer `parity` (0 or 1) of `rank`.
  char* slot(void* base, int rank, std::uint32_t parity) const {
    return static_cast<char*>(base) + data_offset + (static_cast<std::size_t>(rank) * 2 + (parity & 1)) * slot_bytes;
  }
};

}  // namespace ddp::detail::shm
