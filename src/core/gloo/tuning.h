// The gloo backend's variables: the network interface it uses, and the largest all_reduce that
// takes recursive doubling instead of Gloo's ring. Read from a group's variables
// (ProcessGroupOptions::variables over the process's environment) as the backend is made.
#pragma once

#include <cstddef>
#include <string>

#include "util/variables.h"

namespace ddp::detail {

struct GlooTuning {
  // DDP_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME; "": the interface that routes to the master.
  std::string socket_ifname;
  // DDP_GLOO_DOUBLING_BYTES: over TCP (gloo: between hosts, or every rank with DDP_SHM=0), an
  // all_reduce of at most this many bytes takes recursive doubling, log2(n) rounds, instead of
  // Gloo's ring, 2(n - 1) rounds: below it a round's latency costs more than the extra bytes
  // (each round carries the whole buffer; docs/COLLECTIVES.md). The default is the crossover
  // measured at 4 nodes on 10 Gbit/s links. 0: always the ring.
  std::size_t doubling_bytes = 1u << 20;
};

inline constexpr Variable<GlooTuning> kGlooVariables[] = {
    {"DDP_SOCKET_IFNAME", "the network interface Gloo uses (or GLOO_SOCKET_IFNAME)",
     read_text<GlooTuning, &GlooTuning::socket_ifname>, "GLOO_SOCKET_IFNAME"},
    {"DDP_GLOO_DOUBLING_BYTES", "the largest all_reduce by recursive doubling over TCP",
     read_integer<GlooTuning, &GlooTuning::doubling_bytes, 0, std::int64_t{1} << 40>},
};

}  // namespace ddp::detail
