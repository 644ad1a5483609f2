#include "group/failure.h"

#include <thread>

#include "store/lost_ranks.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

// How long a failing rank looks for lost-rank records, which may trail the socket error by a moment.
constexpr auto kLostRecordGrace = std::chrono::milliseconds(1500);

}  // namespace

FailureHandler::FailureHandler(std::shared_ptr<Store> diag, std::string group, int rank, std::vector<int> global_ranks,
                               std::vector<BackendChoice> backends)
    : diag_(std::move(diag)),
      root_(&unprefixed(*diag_)),
      group_(std::move(group)),
      rank_(rank),
      global_ranks_(std::move(global_ranks)),
      backends_(std::move(backends)) {}

std::string FailureHandler::where(const Op& op) const {
  std::string text = cat(describe(op), " in group '", group_, "' on rank ", rank_);
  if (backends_.size() > 1) text += cat(" (over ", backend_for(backends_, op), ")");
  return text;
}

FailureRecord FailureHandler::explain(const Op& op, const std::exception_ptr& cause, std::chrono::milliseconds elapsed,
                                      std::chrono::milliseconds timeout) {
  ErrorInfo info = classify(cause);
  Diagnosis diagnosis;
  if (global_ranks_.size() > 1 && info.kind != ErrorKind::InvalidArgument && info.kind != ErrorKind::Mismatch) {
    diagnosis = diagnose(op, info.kind);
  }
  if (diagnosis.kind == Diagnosis::Kind::Lost) info.kind = ErrorKind::PeerLost;
  if (diagnosis.kind == Diagnosis::Kind::Mismatch) info.kind = ErrorKind::Mismatch;
  std::string message = info.kind == ErrorKind::Timeout
                            ? cat(where(op), " timed out after ", format_duration(elapsed), " (the group's timeout is ",
                                  format_duration(timeout), ")")
                            : cat(where(op), " failed after ", format_duration(elapsed));
  message += cat(": ", info.message);
  if (!diagnosis.text.empty()) message += cat(". ", diagnosis.text);
  FailureRecord record = make_record(info.kind, &op, std::move(message));
  record.lost = std::move(diagnosis.lost);
  record.behind = std::move(diagnosis.behind);
  record.inside = std::move(diagnosis.inside);
  record.mismatched = std::move(diagnosis.mismatched);
  record.first = diagnosis.first;
  record.detail = std::move(diagnosis.text);
  return record;
}

FailureRecord FailureHandler::explain_p2p(const Op& op, const std::exception_ptr& cause) {
  ErrorInfo info = classify(cause);
  std::string message = cat(where(op), " failed: ", info.message);
  auto lost = find_lost_ranks(*root_, {global_ranks_[op.peer]});
  std::string detail;
  if (!lost.empty()) {
    info.kind = ErrorKind::PeerLost;
    detail = cat("Rank ", op.peer, " was lost (", lost.front().second, ")");
    message += cat(". ", detail);
  }
  FailureRecord record = make_record(info.kind, &op, std::move(message));
  if (!lost.empty()) record.lost = {lost.front().first};
  record.detail = std::move(detail);
  return record;
}

FailureRecord FailureHandler::make_record(ErrorKind kind, const Op* op, std::string message) const {
  FailureRecord record;
  record.kind = kind;
  record.rank = global_ranks_.at(static_cast<std::size_t>(rank_));
  record.group = group_;
  if (op) {
    record.op = describe(*op);
    record.seq = static_cast<std::int64_t>(op->seq);
  }
  record.message = std::move(message);
  return record;
}

std::string FailureHandler::explain_stall(const Op& op) {
  auto peers = read_peer_states(*diag_, *root_, rank_, global_ranks_, kDiagnosisBudget);
  return detail::diagnose(op, rank_, peers).text;
}

void FailureHandler::record(const FailureRecord& failure) noexcept { publish_failure(*root_, failure); }

void FailureHandler::record(const std::string& message) noexcept {
  try {
    record(make_record(ErrorKind::Other, nullptr, message));
  } catch (...) {  // the copy of the message may fail to allocate; nothing else throws
  }
}

void FailureHandler::record_provisional(const Op& op, const ErrorInfo& cause) noexcept {
  try {
    FailureRecord note = make_record(cause.kind, &op, cat(where(op), " failed: ", cause.message));
    note.state = FailureState::Provisional;
    record(note);
  } catch (...) {  // as record(): only an allocation may fail
  }
}

Diagnosis FailureHandler::diagnose(const Op& op, ErrorKind kind) {
  const auto until = Clock::now() + (kind == ErrorKind::PeerLost ? kLostRecordGrace : std::chrono::milliseconds(0));
  for (;;) {
    auto peers = read_peer_states(*diag_, *root_, rank_, global_ranks_, kDiagnosisBudget);
    Diagnosis diagnosis = detail::diagnose(op, rank_, peers);
    if (diagnosis.kind == Diagnosis::Kind::Lost || diagnosis.kind == Diagnosis::Kind::Mismatch) {
      // A rank that ended on an error it could not throw (flight/last_words) said why first.
      if (auto first = first_failure(false)) {
        diagnosis.text += cat(diagnosis.text.ends_with('.') ? " " : ". ", first->second);
        diagnosis.first = global_ranks_[static_cast<std::size_t>(first->first)];
      }
      return diagnosis;
    }
    if (!peers.store_error.empty()) return diagnosis;
    const auto follows = [&](std::pair<int, std::string> first) {
      Diagnosis d{Diagnosis::Kind::Behind, std::move(first.second)};
      d.first = global_ranks_[static_cast<std::size_t>(first.first)];
      return d;
    };
    if (auto first = first_failure(false)) return follows(std::move(*first));
    // A peer's first note alone may be the echo of a loss whose record the store has not written
    // yet (that peer aborted its connections, and this rank failed of it): it waits for the grace.
    if (Clock::now() >= until) {
      if (auto first = first_failure(true)) return follows(std::move(*first));
      return diagnosis;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::optional<std::pair<int, std::string>> FailureHandler::first_failure(bool provisional) {
  for (int r = 0; r < static_cast<int>(global_ranks_.size()); ++r) {
    if (r == rank_) continue;
    if (auto record = read_failure(*root_, global_ranks_[static_cast<std::size_t>(r)], provisional)) {
      return std::pair(r, cat("Rank ", r, " failed first: ", record->message));  // for the person reading the error
    }
  }
  return std::nullopt;
}

}  // namespace ddp::detail
