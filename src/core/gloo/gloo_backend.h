// Gloo's algorithms over its TCP transport, on CPU buffers: the part of the CPU backend
// (cpu/cpu_backend.h) that talks between hosts.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ddp/backend.h"

namespace ddp::detail {

// What the group knows about where its ranks are, for choosing the address Gloo listens on.
struct GlooPlacement {
  bool one_network = false;  // every rank is in this rank's network namespace: loopback reaches them all
  // The group rank of each rank of this context, for errors (empty: the context is the group's).
  std::vector<int> group_ranks;
  int hosts = 0;  // how many hosts the context's ranks are on (0: not known)
};

// Connects the full mesh through context.store. The address: GLOO_SOCKET_IFNAME (as PyTorch) or
// DDP_SOCKET_IFNAME when set; else loopback for a loopback master; else the local address that
// routes to the master; else loopback when every rank shares this network; else this host's name,
// which must resolve (otherwise IOError saying what to set). Throws on rendezvous failure or timeout.
// An all_reduce of at most `doubling_bytes` takes recursive doubling (doubling.h) instead of Gloo's
// ring; every rank of the group must pass the same value (cpu_backend passes group rank 0's).
std::unique_ptr<Backend> make_gloo_backend(const BackendContext& context, const GlooPlacement& placement = {},
                                           std::size_t doubling_bytes = 0);

}  // namespace ddp::detail
