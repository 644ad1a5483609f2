// The shared-memory path's knobs (docs/SHM.md explains each and how its default was chosen), and
// the variables that set them: a group's (ProcessGroupOptions::variables over the process's
// environment), read by the CPU backend as it is made.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "util/variables.h"

namespace ddp::detail::shm {

struct Tuning {
  // DDP_SHM: "0", "off", "false" or "no" turn the shared-memory path off (plain gloo).
  bool enabled = true;
  // DDP_SHM_CHUNK_BYTES: the pipeline's chunk per rank per step (whole pages). At least the size of
  // a core's L2 cache: what one rank writes has then moved on to the shared L3 when the others read
  // it, which is far faster than taking it from the writer's L2 (docs/SHM.md).
  std::size_t chunk_bytes = 512u << 10;
  // DDP_SHM_SMALL_BYTES: all_reduce and reduce take one step, in which every rank reads every
  // other rank's whole buffer, when (ranks - 1) * bytes is at most this; else the two-step
  // reduce-scatter + all-gather.
  std::size_t small_bytes = 256u << 10;
  // DDP_SHM_STRIPE_BYTES: across hosts of equal sizes, an all_reduce of at least this many bytes
  // is striped over every rank's lane; a smaller one goes through the hosts' first ranks, where
  // one connection's latency, not its bandwidth, is the cost (docs/SHM.md).
  std::size_t stripe_bytes = 1u << 20;
  // DDP_SHM_STRIPE_CHUNK_BYTES: across hosts, all_reduce and broadcast are cut in chunks of this
  // size and pipelined, so that the network carries one chunk while shared memory reduces the
  // next and gathers the last (0: one chunk, unpipelined; docs/SHM.md).
  std::size_t stripe_chunk_bytes = 8u << 20;
  // DDP_SHM_GATHER_CHUNK_BYTES: across hosts, all_gather and reduce_scatter cut every rank's block
  // so that a chunk moves at most this many bytes of the whole group's data, pipelined the same
  // way (0: one chunk). Smaller than the all_reduce's: the link idles for the last chunk's
  // shared-memory gather and reordering copy, which handle all of a chunk (docs/SHM.md).
  std::size_t gather_chunk_bytes = 2u << 20;
  // DDP_SHM_GATHER_STRIPE_BYTES: across hosts of equal sizes, an all_gather (by its output) or
  // reduce_scatter (by its input) of at least this many bytes is striped over every rank's lane;
  // smaller ones, and all of them by default, go through the hosts' first ranks, which measured
  // as fast or faster at every size on emulated nodes (docs/SHM.md). For links that one stream
  // cannot fill.
  std::size_t gather_stripe_bytes = std::numeric_limits<std::int64_t>::max();
  // DDP_SHM_SPIN_US: how long a wait spins before it sleeps on a futex (0: sleep at once).
  std::chrono::microseconds spin{50};
  // DDP_SHM_HOST_ID: replaces the detected host identity (hostname, boot id, pid namespace). Ranks
  // with different values are treated as being on different hosts: testing the hierarchical path
  // on one machine, or keeping apart ranks that must not share memory.
  std::string host_id;
  // A host's segment stays below this size; the chunk shrinks for many ranks per host.
  std::size_t max_segment_bytes = 64u << 20;
};

// DDP_SHM_CHUNK_BYTES, rounded up to whole pages.
void read_chunk_bytes(Tuning& t, std::string_view name, const std::string& value, VariableProblems& problems);

inline constexpr std::int64_t kTerabyte = std::int64_t{1} << 40;
inline constexpr Variable<Tuning> kShmVariables[] = {
    {"DDP_SHM", "0, off, false or no: ranks on one host talk through Gloo over loopback",
     read_switch<Tuning, &Tuning::enabled>},
    {"DDP_SHM_CHUNK_BYTES", "the shared-memory pipeline's chunk (docs/SHM.md)", read_chunk_bytes},
    {"DDP_SHM_SMALL_BYTES", "the largest one-step shared-memory all_reduce (docs/SHM.md)",
     read_integer<Tuning, &Tuning::small_bytes, 0, 64 << 20>},
    {"DDP_SHM_STRIPE_BYTES", "the smallest all_reduce striped over every rank's lane (docs/SHM.md)",
     read_integer<Tuning, &Tuning::stripe_bytes, 0, kTerabyte>},
    {"DDP_SHM_STRIPE_CHUNK_BYTES", "the chunk of a pipelined all_reduce across hosts (docs/SHM.md)",
     read_integer<Tuning, &Tuning::stripe_chunk_bytes, 0, kTerabyte>},
    {"DDP_SHM_GATHER_CHUNK_BYTES", "the chunk of a pipelined all_gather across hosts (docs/SHM.md)",
     read_integer<Tuning, &Tuning::gather_chunk_bytes, 0, kTerabyte>},
    {"DDP_SHM_GATHER_STRIPE_BYTES", "the smallest all_gather striped over every lane (docs/SHM.md)",
     read_integer<Tuning, &Tuning::gather_stripe_bytes, 0, kTerabyte>},
    {"DDP_SHM_SPIN_US", "how long a wait spins before it sleeps (default 50)",
     read_integer<Tuning, &Tuning::spin, 0, 1000000>},
    {"DDP_SHM_HOST_ID", "this host's identity for shared memory (tests, isolation)",
     read_text<Tuning, &Tuning::host_id>},
};

}  // namespace ddp::detail::shm
