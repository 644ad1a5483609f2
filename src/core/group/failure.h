// What a group does when one of its operations fails: it explains the failure from what the
// other ranks recorded in the store (lost-rank records, progress records, the failure records of
// the peers: records/failure_record.h) and leaves its own record for the peers and ddprun. Runs on the thread that ran
// the op; reads the store on a connection of its own with a short timeout, so a broken store
// bounds it too.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/store.h"
#include "group/backend_set.h"
#include "group/diagnosis.h"
#include "records/failure_record.h"
#include "op/op.h"
#include "util/error_kind.h"

namespace ddp::detail {

// What reading the peers' records may cost when explaining a failure: the timeout of the
// store connection the handler reads through.
inline constexpr std::chrono::milliseconds kDiagnosisBudget{5000};

class FailureHandler {
 public:
  // `diag`: the group's keys, on a connection of its own. `global_ranks[r]`: group rank r's global
  // rank. `backends`: the group's spec (group/backend_set.h), whose backend an op's error names
  // when there are several.
  FailureHandler(std::shared_ptr<Store> diag, std::string group, int rank, std::vector<int> global_ranks,
                 std::vector<BackendChoice> backends = {});

  // "all_reduce #12 (float32 x 4, SUM) in group 'world' on rank 1", and in a device-keyed group
  // the backend that ran it: "... on rank 1 (over nccl)".
  std::string where(const Op& op) const;

  // The error a collective's failure becomes, as text (record.message: where, how long it ran, the
  // cause and what the peers were doing) and as data (the ranks it names). Its kind follows the
  // evidence (a lost peer: PeerLost; ranks that called different ops: Mismatch), else the cause's.
  // Argument errors are passed on unexplained.
  FailureRecord explain(const Op& op, const std::exception_ptr& cause, std::chrono::milliseconds elapsed,
                        std::chrono::milliseconds timeout);
  // The same for a send or recv: names the peer when the store records it as lost.
  FailureRecord explain_p2p(const Op& op, const std::exception_ptr& cause);
  // What a caller's Work::wait(timeout) on `op` reports when it runs out.
  std::string explain_stall(const Op& op);

  // Leaves this rank's failure record where the peers' explanations and ddprun find it (the
  // process's first final one stays; it replaces a provisional one). Never throws.
  void record(const FailureRecord& failure) noexcept;
  // The same for an error that is only text (flight/last_words: one the process could not throw).
  void record(const std::string& message) noexcept;
  // The provisional record of a lost peer (`cause`: the backend's error, classified), before this
  // rank has explained its failure (and before it aborts its connections, which makes its peers
  // fail too): the peers name it only when nothing better (a lost-rank record, a final record)
  // turns up within the grace a lost peer's record gets; ddprun reads final records only.
  void record_provisional(const Op& op, const ErrorInfo& cause) noexcept;

 private:
  Diagnosis diagnose(const Op& op, ErrorKind kind);
  // The first other rank's failure, as the error shows it ("Rank N failed first: <its message>"),
  // and its group rank: the final records, or with `provisional` the provisional ones too.
  std::optional<std::pair<int, std::string>> first_failure(bool provisional);
  FailureRecord make_record(ErrorKind kind, const Op* op, std::string message) const;

  std::shared_ptr<Store> diag_;
  Store* root_;  // unprefixed(*diag_): lost-rank and failure records, on diag_'s connection
  std::string group_;
  int rank_;
  std::vector<int> global_ranks_;
  std::vector<BackendChoice> backends_;
};

}  // namespace ddp::detail
