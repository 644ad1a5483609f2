#include "summary.h"

#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

namespace {

const std::string kRule(72, '=');

std::string describe_worker_end(const WorkerExit& w) {
  if (w.stopped) return cat("stopped by ddprun (", w.status(), ")");
  if (!w.failed()) return "exited 0";
  return cat("failed: ", w.status(), " at ", format_time(w.time));
}

}  // namespace

std::string format_summary(const SummaryInput& in) {
  const AttemptEnd& root = in.root;
  std::string out = kRule + "\n";
  out += cat("ddprun: the job failed on attempt ", in.attempt + 1, " of ", in.max_restarts + 1, " (--max_restarts=",
             in.max_restarts, ")");
  out += in.restarting ? cat("; restarting every worker (attempt ", in.attempt + 2, ")\n") : "\n";
  if (root.kind == AttemptEnd::Kind::WorkerFailed) {
    const WorkerExit& w = root.worker;
    out += "Root cause (first failure):\n";
    out += cat("  rank       : ", w.rank, " (local rank ", w.local_rank, " on node ", w.node_rank, ")\n");
    out += cat("  host       : ", w.host, "\n");
    out += cat("  pid        : ", w.pid, "\n");
    out += cat("  exit       : ", w.status(), w.signal != 0 ? " (the worker was killed by a signal)" : "", "\n");
    out += cat("  time       : ", format_time(w.time), "\n");
    out += cat("  log file   : ",
               w.log_file.empty() ? std::string("none (pass --log_dir DIR to keep each worker's output)") : w.log_file,
               "\n");
    if (w.last_lines.empty()) {
      out += "  last lines : (it printed nothing)\n";
    } else {
      out += cat("  last lines : (", w.last_lines.size(), ")\n");
      for (const auto& line : w.last_lines) out += cat("    [", w.rank, "]: ", line, "\n");
    }
  } else {
    out += cat("Root cause: ", root.what, "\n");
  }
  if (!in.local.empty()) {
    out += cat("Workers on this node (node ", in.node_rank, ", host ", in.host, "):\n");
    for (const WorkerExit& w : in.local) {
      const bool is_root = root.kind == AttemptEnd::Kind::WorkerFailed && root.worker.rank == w.rank &&
                           root.worker.pid == w.pid;
      out += cat("  rank ", w.rank, " (local rank ", w.local_rank, ", pid ", w.pid, "): ", describe_worker_end(w),
                 is_root ? "  <- root cause" : "", "\n");
    }
  }
  out += kRule + "\n";
  return out;
}

}  // namespace ddp::launcher
