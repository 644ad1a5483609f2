#include "reports/summary.h"

#include <signal.h>

#include <algorithm>

#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

namespace {

const std::string kRule(72, '=');

std::string describe_worker_end(const WorkerExit& w) {
  std::string text = w.stopped     ? cat("stopped by ddprun (", w.status(), ")")
                     : !w.failed() ? std::string("exited 0")
                                   : cat("failed: ", w.status(), " at ", format_time(w.time));
  if (!w.suspended.empty()) text += cat("; it had been ", w.suspended, " when the attempt ended");
  return text;
}

// Where a worker ran.
std::string describe_place(const WorkerExit& w) {
  std::string out = cat("  rank       : ", w.rank, " (local rank ", w.local_rank, " on node ", w.node_rank, ")\n");
  out += cat("  host       : ", w.host, "\n");
  out += cat("  pid        : ", w.pid, "\n");
  return out;
}

// A worker's log file and last lines.
std::string describe_output(const WorkerExit& w) {
  std::string out = cat(
      "  log file   : ",
      w.log_file.empty() ? std::string("none (pass --log_dir DIR to keep each worker's output)") : w.log_file, "\n");
  if (w.last_lines.empty()) {
    out += "  last lines : (it printed nothing)\n";
  } else {
    out += cat("  last lines : (", w.last_lines.size(), ")\n");
    for (const auto& line : w.last_lines) out += cat("    [", w.rank, "]: ", line, "\n");
  }
  return out;
}

// The lines of a worker that failed: where it ran, how it ended, its log and last lines.
std::string describe_failure(const WorkerExit& w) {
  std::string out = describe_place(w);
  out += cat("  exit       : ", w.status(), w.signal != 0 ? " (the worker was killed by a signal)" : "", "\n");
  out += cat("  time       : ", format_time(w.time), "\n");
  return out + describe_output(w);
}

std::string describe_blame(const Blame& b) {
  std::string out = cat("Root cause: rank ", b.rank, ", which the first failure waited for\n");
  out += cat("  rank       : ", b.rank, " (local rank ", b.local_rank, " on node ", b.node_rank, ")\n");
  out += cat("  host       : ", b.host, "\n");
  out += cat("  pid        : ", b.pid > 0 ? cat(b.pid) : cat("see the summary of node ", b.node_rank), "\n");
  out += cat("  evidence   : ", b.evidence, "\n");
  return out;
}

// "Workers on this node ...:" and a line per worker, marking the root cause and first failure.
std::string describe_local(const std::vector<WorkerExit>& local, int node_rank, const std::string& host,
                           const AttemptEnd* root) {
  if (local.empty()) return "";
  std::string out = cat("Workers on this node (node ", node_rank, ", host ", host, "):\n");
  for (const WorkerExit& w : local) {
    const bool failed_first = root && root->names_worker() && root->worker.rank == w.rank && root->worker.pid == w.pid;
    const bool blamed = root && root->blame && root->blame->rank == w.rank;
    const char* mark = "";
    if (blamed || (failed_first && !root->blame)) mark = "  <- root cause";
    if (failed_first && root->blame) mark = "  <- first failure";
    out += cat("  rank ", w.rank, " (local rank ", w.local_rank, ", pid ", w.pid, "): ", describe_worker_end(w), mark,
               "\n");
  }
  return out;
}

std::string describe_history(const std::vector<std::string>& history) {
  if (history.empty()) return "";
  std::string out = cat("Membership changes (", history.size(), "):\n");
  for (const auto& line : history) out += "  " + line + "\n";
  return out;
}

}  // namespace

std::string describe_straggler(const std::string& report) {
  return report.empty() ? "" : cat("Last straggler report: ", report, "\n");
}

std::string format_summary(const SummaryInput& in) {
  const AttemptEnd& root = in.root;
  std::string out = kRule + "\n";
  out += cat("ddprun: the job failed on attempt ", in.attempt + 1, " of ", in.max_restarts + 1,
             " (--max_restarts=", in.max_restarts, ")");
  out += in.restarting ? cat("; restarting every worker (attempt ", in.attempt + 2, ")\n") : "\n";
  if (root.kind == AttemptEnd::Kind::WorkerFailed) {
    if (root.blame) {
      out += describe_blame(*root.blame);
      out += "First failure (a consequence of the root cause):\n";
    } else {
      out += "Root cause (first failure):\n";
    }
    out += describe_failure(root.worker);
  } else if (root.kind == AttemptEnd::Kind::WorkerStopped) {
    out += cat("Root cause: ", root.what, "\n");
    out += describe_place(root.worker) + describe_output(root.worker);
  } else {
    out += cat("Root cause: ", root.what, "\n");
  }
  out += describe_local(in.local, in.node_rank, in.host, &root);
  out += describe_history(in.history);
  out += describe_straggler(in.straggler);
  out += kRule + "\n";
  return out;
}

std::string format_stop_report(const StopInput& in) {
  std::string out = kRule + "\n";
  out += cat("ddprun: the job was stopped by ", signal_name(in.signal), " (a request, not a failure): ", in.what, "\n");
  out += describe_local(in.local, in.node_rank, in.host, nullptr);
  const bool killed = std::any_of(in.local.begin(), in.local.end(),
                                  [](const WorkerExit& w) { return w.stopped && w.signal == SIGKILL; });
  if (killed) {
    out += cat("Not every worker ended within --grace_period=", detail::format_duration(in.grace_period),
               ": what those ended by SIGKILL were writing (a checkpoint, a log) may be incomplete.\n");
  }
  if (in.checkpoint) {
    const CheckpointRecord& c = *in.checkpoint;
    out += cat("Last checkpoint: step ", c.step, c.path.empty() ? std::string() : cat(", ", c.path),
               " (recorded by rank ", c.rank, ")\n");
    out += cat("To resume from it, run the same command again:\n  ", in.command, "\n");
  }
  out += describe_history(in.history);
  out += describe_straggler(in.straggler);
  out += kRule + "\n";
  return out;
}

}  // namespace ddp::launcher
