#include "reports/agent_report.h"

#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

std::string place_line(const Membership& membership, int nproc, std::optional<int> round) {
  if (membership.nnodes == 1 && !round) return "";
  const int first = membership.rank_offset();
  return cat(round && *round > 0 ? cat("round ", *round, ": ") : std::string(), "node ", membership.node_rank, " of ",
             membership.nnodes, ": ranks ", first, " to ", first + nproc - 1, " of ", membership.world_size());
}

std::string waiting_line(const RoundRecord& full, int min_nodes, int max_nodes) {
  const bool room = static_cast<int>(full.nodes.size()) < max_nodes;
  return cat(
      "the job runs with ", full.nodes.size(), " node", full.nodes.size() == 1 ? "" : "s", " (round ", full.round,
      "); this node waits for the next round: ",
      room ? "the running nodes stop their workers (SIGTERM, then --grace_period) to let it in"
           : cat("the job has the most nodes --nnodes=", min_nodes, ":", max_nodes, " allows, so until one is lost"));
}

std::string success_report(const std::string& straggler, int round, const Membership& membership,
                           const std::vector<MembershipChange>& history) {
  std::string text;
  if (!straggler.empty()) text += cat("ddprun: the job succeeded; its last straggler report: ", straggler, "\n");
  if (!history.empty()) {
    text += cat("ddprun: the job succeeded in round ", round, " with ", membership.nnodes, " node",
                membership.nnodes == 1 ? "" : "s", ", ", membership.world_size(), " workers, after ", history.size(),
                " membership change", history.size() == 1 ? "" : "s", ":\n");
    for (const auto& line : history_lines(history)) text += "  " + line + "\n";
  }
  return text;
}

std::vector<std::string> history_lines(const std::vector<MembershipChange>& history) {
  std::vector<std::string> lines;
  for (const auto& change : history) lines.push_back(history_line(change));
  return lines;
}

}  // namespace ddp::launcher
