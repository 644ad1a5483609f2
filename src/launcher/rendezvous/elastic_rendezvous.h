// c10d's rendezvous, in rounds (torchrun's dynamic rendezvous, on ddprun's own store): every
// agent registers once (its agent id is its arrival number), then asks to be in a round; the node
// hosting the store closes each round and writes who is in it (round_record.h). A round closes at
// --nnodes MAX nodes, or at MIN or more once every node of the last round that is still alive has
// rejoined and no node arrived for last_call_timeout; with fewer than MIN after join_timeout the
// job cannot go on. A node the round has no room for waits for the next one.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/attempt_end.h"
#include "rendezvous/heartbeat.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/round_record.h"

namespace ddp {
class Store;
}

namespace ddp::launcher {

// The job ended (the node hosting the store said so) before a round took this node.
struct JobClosed {
  std::string outcome;  // "succeeded", or what ended it
  bool succeeded = false;
};

// Registers this agent: takes its agent id, records its node (workers, host, pid) and checks the
// flags against the hosting node's. The coordinator writes the flags first. Returns the agent id
// and the round to ask for first (0, or the one after the last formed: the job runs already).
// Throws MismatchError (flags that differ), TimeoutError (the hosting node never wrote its flags
// within join_timeout), or what check_interrupt throws.
struct Registration {
  int agent = 0;
  int first_round = 0;
};
Registration register_agent(Store& store, const RendezvousSettings& settings,
                            const std::function<void()>& check_interrupt);

// What decides a round's closing (pure): `joined` nodes asked for it, `pending` nodes of the last
// round are alive but have not asked yet (still stopping their workers), `since_arrival` passed
// since the last one asked, `elapsed` since the round began forming.
enum class RoundDecision { Wait, Close, Fail };
RoundDecision decide_round(int joined, int pending, int min_nodes, int max_nodes,
                           std::chrono::milliseconds since_arrival, std::chrono::milliseconds elapsed,
                           std::chrono::milliseconds last_call_timeout, std::chrono::milliseconds join_timeout);

// What the next round starts from: the last round (none before the first), how it ended, and
// the restarts used so far including the one this round takes.
struct RoundStart {
  std::optional<RoundRecord> previous;
  std::optional<AttemptEnd> end;
  int restarts_used = 0;
};

// Asks for round `round` and returns the record of the round this agent is in: the coordinator
// forms it (and writes it, formed or failed), the others wait for it. An agent that a round has
// no room for asks for the next, calling `waiting` once with that round's record. Throws
// AttemptEndedEarly (the round's attempt ended before it formed: a node was interrupted),
// JobClosed, TimeoutError (no round had room within join_timeout), Error (the store is lost),
// or what check_interrupt throws. A record with formed == false (too few nodes) is returned.
RoundRecord join_round(Store& store, const RendezvousSettings& settings, int agent, int round, const RoundStart& start,
                       const std::function<void()>& check_interrupt,
                       const std::function<void(const RoundRecord&)>& waiting);

// The coordinator's look at a round while it runs (EndWatcher's `look`): a node of `others` gone
// ends it (AgentLost); with `room` (an elastic job below MAX), so does a node asking for the next
// round (NodeWaiting), unless a node has finished already. `members`: the round's agent ids.
std::function<std::optional<AttemptEnd>(Store&)> round_watch(NodeWatch others, std::vector<int> members, bool room,
                                                             int round, AttemptEnd reporter);

// The coordinator, when the job ends: later arrivals waiting for a round learn it. Never throws.
void close_job(Store& store, const std::string& outcome, bool succeeded);

}  // namespace ddp::launcher
