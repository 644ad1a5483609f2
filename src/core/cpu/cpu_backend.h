// The CPU backend, registered as "gloo": Gloo (gloo/) between hosts, shared memory (shm/) among
// the ranks of one host. Decided per group at creation, the same way on every rank, from the host
// identities the ranks exchange through the group's store:
//   - DDP_SHM=0 on any rank, or no two ranks on one host: plain gloo;
//   - every rank on one host: all_reduce, reduce, reduce_scatter, broadcast, all_gather and
//     barrier through shared memory (every dtype and op natively, 16-bit floats accumulated in
//     float32); gather, scatter, all_to_all and send/recv through gloo;
//   - several hosts: all_reduce and broadcast are hierarchical (shared memory within each host,
//     gloo between them, pipelined in chunks), and so are all_gather and reduce_scatter when every
//     host has the same number L > 1 of ranks: striped over L lanes (local index l of every host),
//     so that every rank's connection carries its share at once (cpu/hierarchy.h). reduce, barrier
//     and the rest are gloo over the whole group.
// When a rank cannot map its host's segment (another user, a hidden /proc), the whole group
// falls back to plain gloo with a warning saying why. Ranks that share one network namespace
// tell Gloo so, which then needs no resolvable host name (gloo/gloo_backend.h).
#pragma once

#include <memory>
#include <vector>

#include "ddp/backend.h"
#include "util/variables.h"

namespace ddp::detail {

std::unique_ptr<Backend> make_cpu_backend(const BackendContext& context);

// The variables it reads as it is made: the shared-memory tuning and Gloo's.
std::vector<VariableInfo> cpu_backend_variables();

}  // namespace ddp::detail
