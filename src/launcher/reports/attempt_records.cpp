#include "reports/attempt_records.h"

#include <utility>

#include "reports/blame.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

namespace {

long pid_of(const WorkerGroup& group, int rank) {
  for (const WorkerExit& w : group.exits()) {
    if (w.rank == rank) return w.pid;
  }
  return 0;
}

}  // namespace

std::string stopped_alone_notice(const WorkerGroup& group, std::chrono::milliseconds bound) {
  std::string who, pids;
  const auto& stopped = group.stopped_alone();
  for (const auto& s : stopped) {
    who += cat(who.empty() ? "" : "; ", "rank ", s.rank, " (pid ", pid_of(group, s.rank), ") is ", s.state);
    pids += cat(" ", pid_of(group, s.rank));
  }
  const char* them = stopped.size() == 1 ? "it" : "them";
  return cat(who, ", and every other worker of the job has exited: no collective is left to time out on ", them,
             " and nothing will continue ", them, ". Continue ", them, " to let ", them, " finish (kill -CONT", pids,
             "); otherwise ddprun ends ", them, " as a failure in ", detail::format_duration(bound),
             " (--stopped_timeout).");
}

AttemptEnd stopped_too_long_end(const WorkerGroup& group, AttemptEnd reporter, std::chrono::milliseconds bound) {
  const SuspendedWorker& first = group.stopped_alone().front();
  AttemptEnd end = std::move(reporter);
  end.kind = AttemptEnd::Kind::WorkerStopped;
  for (const WorkerExit& w : group.exits()) {
    if (w.rank == first.rank) end.worker = w;
  }
  end.what = cat("rank ", first.rank, " stayed ", first.state, " for ", detail::format_duration(bound),
                 " after every other worker of the job had exited: no collective was left to time out on it and "
                 "nothing would continue it, so ddprun ended it (SIGCONT and SIGTERM, then SIGKILL after "
                 "--grace_period) as a failure (--stopped_timeout=",
                 detail::format_duration(bound), ")");
  return end;
}

std::optional<Blame> blame_for(WorkerGroup& group, std::size_t index, const Membership& membership,
                               const FailureLookup& records) {
  const WorkerExit& failed = group.exit_of(index);
  const auto culprit = find_root_cause(failed.rank, records, group.kept_lines(index), group.find_suspended());
  if (!culprit) return std::nullopt;
  Blame b;
  b.rank = culprit->rank;
  b.evidence = culprit->evidence;
  for (const WorkerExit& w : group.exits()) {
    if (w.rank != b.rank) continue;
    b.local_rank = w.local_rank;
    b.node_rank = w.node_rank;
    b.host = w.host;
    b.pid = w.pid;
    return b;
  }
  // Another node's worker: ranks are numbered node by node.
  int first = 0;
  for (int n = 0; n < membership.nnodes; ++n) {
    const auto& node = membership.nodes[static_cast<std::size_t>(n)];
    if (b.rank < first + node.nproc) {
      b.node_rank = n;
      b.local_rank = b.rank - first;
      b.host = node.host;
      return b;
    }
    first += node.nproc;
  }
  return std::nullopt;  // a rank outside the job: the evidence was misread
}

AttemptEnd worker_failed_end(WorkerGroup& group, AttemptEnd reporter, const Membership& membership,
                             const FailureLookup& records) {
  AttemptEnd failed = std::move(reporter);
  failed.kind = AttemptEnd::Kind::WorkerFailed;
  const std::size_t index = *group.failed_worker();
  failed.worker = group.exits()[index];
  failed.blame = blame_for(group, index, membership, records);
  return failed;
}

}  // namespace ddp::launcher
