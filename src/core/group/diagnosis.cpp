#include "group/diagnosis.h"

#include "ddp/store.h"
#include "store/lost_ranks.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

std::string where(const PeerState& p) {
  if (!p.progress || p.progress->started == 0) return "it has not started any collective in this group";
  const auto& r = *p.progress;
  std::string last = describe(r.last);
  return r.finished >= r.started ? cat("its last was ", last, ", finished") : cat("it is in ", last, ", not finished");
}

std::string rank_name(const PeerState& p) {
  return p.rank == p.global_rank ? cat("rank ", p.rank) : cat("rank ", p.rank, " (global rank ", p.global_rank, ")");
}

}  // namespace

Diagnosis diagnose(const Op& op, int rank, const PeerStates& states) {
  Diagnosis d;
  if (!states.store_error.empty()) {
    d.kind = Diagnosis::Kind::Lost;
    d.text = cat("The job's store cannot be reached either (", states.store_error,
                 "), so the process hosting it (rank 0, or the launcher) has most likely died: look at its output "
                 "for the cause.");
    return d;
  }
  const auto& peers = states.peers;
  std::vector<std::string> lost, mismatched, behind, inside;
  const Fingerprint mine = fingerprint(op);
  for (const auto& p : peers) {
    if (p.rank == rank) continue;
    if (p.lost) {
      lost.push_back(cat(rank_name(p), " (", *p.lost, ")"));
      d.lost.push_back(p.global_rank);
    }
    if (!op.is_collective()) continue;
    const bool reached = p.progress && p.progress->started > op.seq;
    if (!reached) {
      behind.push_back(cat(rank_name(p), ": ", where(p)));
      d.behind.push_back(p.global_rank);
    } else if (p.progress->started == op.seq + 1 && p.progress->last != mine) {
      mismatched.push_back(cat(rank_name(p), " called ", describe(p.progress->last)));
      d.mismatched.push_back(p.global_rank);
    } else if (p.progress->started == op.seq + 1 && p.progress->finished <= op.seq) {
      inside.push_back(rank_name(p));
      d.inside.push_back(p.global_rank);
    }
  }
  // A different call is the cause even when it also cost the rank its life (Gloo's ring ends a
  // rank that a larger message overflows): named first, with the loss, whichever was seen first.
  if (!mismatched.empty()) {
    d.kind = Diagnosis::Kind::Mismatch;
    d.text = cat("Ranks disagree on collective #", op.seq, ": this rank (", rank, ") called ", describe(op), ", but ",
                 join(mismatched, "; "),
                 ". Every rank must call the same collectives, with the same sizes and types, in the same order.");
  }
  if (!lost.empty()) {
    if (d.kind == Diagnosis::Kind::None) d.kind = Diagnosis::Kind::Lost;
    d.text += cat(d.text.empty() ? "" : " ", lost.size() == 1 ? "Lost " : "Lost ranks: ", join(lost, "; "),
                  ": its connection to the store closed without a goodbye, so the process most likely died. "
                  "Look at that rank's output for the cause; the job cannot continue without it "
                  "(restart it, e.g. with ddprun --max_restarts).");
  }
  // The data says what the text says: the ranks of the sentences written, no others.
  if (d.kind != Diagnosis::Kind::None) {
    d.behind.clear();
    d.inside.clear();
    return d;
  }
  if (!behind.empty()) d.inside.clear();
  if (!behind.empty()) {
    d.kind = Diagnosis::Kind::Behind;
    d.text = cat("Ranks that had not reached ", describe(op), ": ", join(behind, "; "),
                 ". Such a rank may be stopped (SIGSTOP, a debugger), stuck or slow in its own work, or skipping "
                 "this collective (a rank-dependent branch).");
  } else if (!inside.empty()) {
    // Everyone got here: the op itself stalls (a rank stopped inside it, or the network).
    d.kind = Diagnosis::Kind::Behind;
    d.text = cat("Every rank reached ", describe(op), "; still inside it: ", join(inside, ", "),
                 ". A rank stopped inside the collective (SIGSTOP, a debugger), a rank starved of CPU, or a network "
                 "fault between the ranks looks like this.");
  }
  return d;
}

PeerStates read_peer_states(Store& group_store, Store& root, int rank, const std::vector<int>& global_ranks,
                            std::chrono::milliseconds budget) {
  PeerStates states;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (int r = 0; r < static_cast<int>(global_ranks.size()); ++r) {
    PeerState p;
    p.rank = r;
    p.global_rank = global_ranks[r];
    if (r != rank && states.store_error.empty() && std::chrono::steady_clock::now() < deadline) {
      try {
        const std::string lost = lost_rank_key(p.global_rank);
        if (root.check({lost})) p.lost = root.get(lost);
        const std::string key = progress_key(r);
        if (group_store.check({key})) p.progress = decode_progress(group_store.get(key));
      } catch (const std::exception& e) {
        states.store_error = e.what();
      }
    }
    states.peers.push_back(std::move(p));
  }
  return states;
}

}  // namespace ddp::detail
