// The knobs of the CPU backend (the shared-memory path, and its small all_reduce over TCP), read
// from the environment when a group is created. docs/SHM.md explains each one and how the defaults
// were chosen.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

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
  // DDP_GLOO_DOUBLING_BYTES: over TCP (gloo: between hosts, or every rank with DDP_SHM=0), an
  // all_reduce of at most this many bytes takes recursive doubling, log2(n) rounds, instead of
  // Gloo's ring, 2(n - 1) rounds: below it a round's latency costs more than the extra bytes
  // (each round carries the whole buffer; docs/COLLECTIVES.md). The default is the crossover
  // measured at 4 nodes on 10 Gbit/s links. 0: always the ring.
  std::size_t gloo_doubling_bytes = 1u << 20;
  // DDP_SHM_SPIN_US: how long a wait spins before it sleeps on a futex (0: sleep at once).
  std::chrono::microseconds spin{50};
  // DDP_SHM_HOST_ID: replaces the detected host identity (hostname, boot id, pid namespace). Ranks
  // with different values are treated as being on different hosts: testing the hierarchical path
  // on one machine, or keeping apart ranks that must not share memory.
  std::string host_id;
  // A host's segment stays below this size; the chunk shrinks for many ranks per host.
  std::size_t max_segment_bytes = 64u << 20;

  // Reads the variables above; malformed values fall back to the defaults with a warning.
  static Tuning from_env();
};

}  // namespace ddp::detail::shm
