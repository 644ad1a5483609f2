// The CPU backend, registered as "gloo": Gloo (gloo/) between hosts, shared memory (shm/) among
// the ranks of one host. Decided per group at creation, the same way on every rank, from the host
// identities the ranks exchange through the group's store:
//   - DDP_SHM=0 on any rank, or no two ranks on one host: plain gloo;
//   - every rank on one host: all_reduce, reduce, reduce_scatter, broadcast, all_gather and
//     barrier through shared memory (every dtype and op natively, 16-bit floats accumulated in
//     float32); gather, scatter, all_to_all and send/recv through gloo;
//   - several hosts: all_reduce is hierarchical. When every host has the same number L > 1 of
//     ranks it is striped: a shared-memory reduce-scatter leaves each rank its share (1/L of the
//     buffer) reduced over its host, each rank all-reduces its share through gloo with the ranks of
//     the same index on the other hosts (L lanes in parallel, so every rank's connection carries
//     1/L of the data), and a shared-memory all-gather gives everyone every share. Otherwise
//     shared-memory reduce to each host's first rank, gloo all_reduce among those, shared-memory
//     broadcast back. Everything else is gloo.
// When a rank cannot map its host's segment (another user, a hidden /proc), the whole group
// falls back to plain gloo with a warning saying why. Ranks that share one network namespace
// tell Gloo so, which then needs no resolvable host name (gloo/gloo_backend.h).
#pragma once

#include <memory>

#include "ddp/backend.h"

namespace ddp::detail {

std::unique_ptr<Backend> make_cpu_backend(const BackendContext& context);

}  // namespace ddp::detail
