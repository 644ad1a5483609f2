// What an agent says on the console about its job, as text: this node's place in it, why a node
// waits for the next round, the report of a job that succeeded, and an elastic job's membership
// changes as the failure summary and the stop report list them (summary.h). Pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/rendezvous.h"
#include "rendezvous/round_record.h"

namespace ddp::launcher {

// "round 2: node 1 of 2: ranks 2 to 3 of 4" (the round for an elastic job); empty for a job of
// one node without rounds, which has nothing to place.
std::string place_line(const Membership& membership, int nproc, std::optional<int> round);

// Why this node waits: the job already runs with `full`'s nodes, and either makes room (the
// running nodes stop their workers) or has the most nodes --nnodes allows.
std::string waiting_line(const RoundRecord& full, int min_nodes, int max_nodes);

// After a job that succeeded: its last straggler report, and, for an elastic job whose
// membership changed, the round it ended in and each change. Lines prefixed "ddprun: ", ending
// in '\n'; empty when there is nothing to say.
std::string success_report(const std::string& straggler, int round, const Membership& membership,
                           const std::vector<MembershipChange>& history);

// One line per change (history_line), for SummaryInput and StopInput.
std::vector<std::string> history_lines(const std::vector<MembershipChange>& history);

}  // namespace ddp::launcher
