// Joining a group through its store, before any backend exists: every rank claims its rank,
// checks that all agree on the size, and waits for the others. Keys (under the group's prefix):
// claims, rank/<r>/owner, size, joined/<r>, join_error, join_error_seen.
#pragma once

#include <chrono>
#include <string>

#include "ddp/store.h"

namespace ddp::detail {

// Blocks until all `size` ranks of group `name` joined. Throws MismatchError when two processes
// claim one rank or the ranks disagree on the size (every waiting rank fails with the first
// conflict found, which is recorded under "join_error"), and TimeoutError naming the ranks that
// did not join within `timeout`.
void join_group(Store& store, const std::string& name, int rank, int size, std::chrono::milliseconds timeout);

}  // namespace ddp::detail
