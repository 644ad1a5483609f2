// A failure as data: what a rank's failure says about the other ranks (lost, behind, mismatched,
// still inside the op; the rank whose earlier failure it follows), in global ranks, beside the text
// written for people. The failing rank leaves it in the job's store from the moment it knows of the
// failure (provisional, then final: one record, one key), where its peers' explanations, ddprun's
// blame and its summaries read it: rewording a message changes nothing they conclude.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/error_kind.h"

namespace ddp {
class Store;
}

namespace ddp::detail {

// A lost peer is noted at once, before this rank explains its failure (and aborts its connections,
// which makes its peers fail too): provisional. The explained failure is final and replaces it.
enum class FailureState { Provisional, Final };

struct FailureRecord {
  ErrorKind kind = ErrorKind::Other;
  FailureState state = FailureState::Final;
  int rank = -1;                // the global rank that failed
  std::string group;            // "world"
  std::string op;               // "all_reduce #39 (float32 x 1, SUM)"; "" when no op (joining the group)
  std::int64_t seq = -1;        // the op's sequence number in its group, -1 when no op
  std::vector<int> lost;        // ranks the store recorded as lost
  std::vector<int> behind;      // ranks that had not reached the op (or the group, when joining)
  std::vector<int> inside;      // ranks that reached the op and had not finished it
  std::vector<int> mismatched;  // ranks that called another op at its sequence number
  int first = -1;               // the rank whose earlier failure this one follows, -1 when none
  std::string detail;           // the diagnosis, for people ("Ranks that had not reached ...")
  std::string message;          // the whole error, for people
  bool operator==(const FailureRecord&) const = default;
};

// "__ddp/failure/<global rank>", in the job's store beside the lost-rank records (unprefixed).
std::string failure_record_key(int global_rank);

// The text form; decode_failure_record(encode(r)) == r for every record.
std::string encode(const FailureRecord& record);
// Throws IOError naming the fault for anything but a whole record of this version or of version 1
// (before the state field: flight dumps written then carry those; they read as final).
FailureRecord decode_failure_record(std::string_view text);

// The ranks `record` says its rank waited for: the lost, those behind, those still inside the op
// (each once, in that order). Mismatched ranks are not among them: a mismatch has no one culprit.
std::vector<int> waited_for(const FailureRecord& record);

// The store under every PrefixStore of `store`: where the server writes lost-rank records and the
// failure records are kept, found without knowing the job's prefixes.
Store& unprefixed(Store& store);

// Leaves `record` under its rank's key, in the store under every PrefixStore of `store`, unless a
// final one is there already (a process's first failure is the one that explains the rest) or
// `record` is provisional and one is there: a final record replaces a provisional one. Never
// throws: an unreachable store keeps no record.
void publish_failure(Store& store, const FailureRecord& record) noexcept;
// Removes the record of `global_rank` (before a new attempt starts that rank). Never throws.
void clear_failure(Store& store, int global_rank) noexcept;
// The record of `global_rank` (read as publish_failure writes it); nullopt when there is none, it
// cannot be read, it is malformed, or it is provisional and `provisional` is false.
std::optional<FailureRecord> read_failure(Store& store, int global_rank, bool provisional = false) noexcept;

}  // namespace ddp::detail
