// Joining a group through its store, before any backend exists: every rank claims its rank,
// checks that all agree on the size, and waits for the others. Keys (under the group's prefix):
// claims, rank/<r>/owner, size, joined/<r>, join_error, join_error_seen, connected/<r>.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "ddp/error.h"

#include "ddp/store.h"

namespace ddp::detail {

// The TimeoutError of await_members and all_connected: also names, as data, the group ranks that did
// not arrive (for the failure record, records/failure_record.h).
class RanksMissingError : public TimeoutError {
 public:
  RanksMissingError(const std::string& message, std::vector<int> ranks)
      : TimeoutError(message), ranks_(std::move(ranks)) {}
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::vector<int> ranks_;
};

// Blocks until all `size` ranks of group `name` joined. Throws MismatchError when two processes
// claim one rank or the ranks disagree on the size (every waiting rank fails with the first
// conflict found, which is recorded under "join_error"), and TimeoutError naming the ranks that
// did not join within `timeout`. `unusable`: this rank cannot take part (its backend refused the
// machine, e.g. a GPU that LOCAL_RANK names but the process cannot see): it is recorded as the
// join error, which the others throw at once naming this rank, and rethrown here.
void await_members(Store& store, const std::string& name, int rank, int size, std::chrono::milliseconds timeout,
                   const std::exception_ptr& unusable = nullptr);

// After the backend has connected: blocks until every rank's has (key connected/<r>), so that no
// rank returns from creating the group, and may destroy it at once, while a slower peer is still
// completing its connections (gloo's full mesh then fails on a reset: PyTorch ends
// init_process_group with a store barrier for the same reason). TimeoutError names the ranks that
// did not finish within `timeout`.
void all_connected(Store& store, const std::string& name, int rank, int size, std::chrono::milliseconds timeout);

}  // namespace ddp::detail
