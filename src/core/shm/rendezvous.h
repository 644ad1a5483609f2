// Setting up a host's segment through the group's store: the host's first rank creates it and
// publishes where it is ("shm/segment/<host>": pid, descriptor, size, nonce); the others map it
// through /proc and check the nonce. Waits are bounded by the deadline and fail early when the
// rank they wait for has exited.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "shm/host_collectives.h"
#include "shm/topology.h"
#include "shm/tuning.h"

namespace ddp {
class Store;
}

namespace ddp::detail::shm {

using Deadline = std::chrono::steady_clock::time_point;

// Publishes this rank's identity and returns every rank's, in rank order.
std::vector<Identity> exchange_identities(Store& store, int rank, int size, const Identity& mine, Deadline deadline);

// Creates (the host's leader) or maps (the others) this host's segment. Requires
// plan.my_host().size() >= 2. Throws IOError, TimeoutError or PeerLostError saying what failed.
std::unique_ptr<HostCollectives> join_host_segment(Store& store, const Plan& plan, const std::vector<Identity>& ids,
                                                   const Tuning& tuning, Deadline deadline);

// Every rank says whether its part of the setup worked ("" when it did); returns the failures
// ("rank 3: ...") of the whole group, the same on every rank.
std::vector<std::string> agree_on_setup(Store& store, int rank, int size, const std::string& my_failure,
                                        Deadline deadline);

// The chunk for `ranks` ranks on a host, shrunk so that the segment stays under the cap.
std::size_t chunk_for(const Tuning& tuning, int ranks);

}  // namespace ddp::detail::shm
