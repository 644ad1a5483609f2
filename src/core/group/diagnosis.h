// Explaining a failed or stalled collective from what the other ranks recorded: who was lost,
// who had not reached the operation, who called something else.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "op/op.h"
#include "group/progress.h"

namespace ddp {
class Store;
}

namespace ddp::detail {

struct PeerState {
  int rank = 0;  // group rank
  int global_rank = 0;
  std::optional<ProgressRecord> progress;  // none: never published
  std::optional<std::string> lost;         // set when the store recorded the rank as lost
};

struct Diagnosis {
  enum class Kind { None, Lost, Mismatch, Behind };
  Kind kind = Kind::None;
  std::string text;  // one or more sentences; empty when nothing is known
  // What the text says, as data (records/failure_record.h), in global ranks.
  std::vector<int> lost, behind, inside, mismatched;
  int first = -1;  // the rank whose earlier failure explains this one ("Rank N failed first")
};

struct PeerStates {
  std::vector<PeerState> peers;
  std::string store_error;  // set when the store could not be read (its host may be gone)
};

// Pure: what the peers' states say about `op` (issued by group rank `rank`).
Diagnosis diagnose(const Op& op, int rank, const PeerStates& states);

// Reads every other rank's progress and lost-rank record. Never throws; gives up on the store
// after `budget` or its first failure. `root` is the store the server writes lost-rank records to.
PeerStates read_peer_states(Store& group_store, Store& root, int rank, const std::vector<int>& global_ranks,
                            std::chrono::milliseconds budget);

}  // namespace ddp::detail
