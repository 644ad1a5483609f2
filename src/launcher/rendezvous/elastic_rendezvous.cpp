#include "rendezvous/elastic_rendezvous.h"

#include <algorithm>
#include <map>
#include <set>

#include "rendezvous/attempt_channel.h"
#include "ddp/error.h"
#include "ddp/store.h"
#include "rendezvous/heartbeat.h"
#include "store/lost_ranks.h"
#include "rendezvous/store_keys.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::string nodes_wanted(const RendezvousSettings& s) {
  return s.min_nodes == s.max_nodes ? cat(s.max_nodes) : cat("at least ", s.min_nodes);
}

bool vanished(Store& store, int agent) { return store.check({detail::lost_rank_key(kAgentRankBase + agent)}); }

// The first round an agent asks for: 0, or the one after the last formed (the job runs).
int next_round(Store& store) {
  if (!store.check({keys::kLatestRound})) return 0;
  return static_cast<int>(detail::parse_int(store.get(keys::kLatestRound)).value_or(-1)) + 1;
}

void check_round_not_ended(Store& store, int round) {
  const std::string end = keys::attempt(round, "end");
  if (store.check({end})) throw AttemptEndedEarly{decode_attempt_end(store.get(end))};
}

void check_job_open(Store& store) {
  if (!store.check({keys::kClosed})) return;
  const std::string text = store.get(keys::kClosed);
  throw JobClosed{text.size() > 2 ? text.substr(2) : text, text.rfind("1\n", 0) == 0};
}

struct Loss {
  std::string why;
  std::chrono::system_clock::time_point time;
};

// What changed since the last round: its nodes that are not in this one, and the new ones.
void add_changes(RoundRecord& record, const RendezvousSettings& s, const RoundStart& start,
                 const std::vector<NodeWatch::Node>& expected, const std::map<int, Loss>& lost,
                 const std::vector<int>& joined) {
  if (!start.previous) return;
  const auto wall = std::chrono::system_clock::now();
  const int nnodes = record.formed ? static_cast<int>(record.nodes.size()) : 0;
  const int workers = record.world_size();
  for (const auto& node : expected) {
    if (std::find(joined.begin(), joined.end(), node.agent) != joined.end()) continue;  // in it (or too late: full)
    MembershipChange c;
    c.kind = MembershipChange::Kind::Lost;
    c.agent = node.agent;
    c.node_rank = node.node_rank;
    c.host = node.host;
    c.pid = node.pid;
    auto it = lost.find(node.agent);
    c.time = it != lost.end() ? it->second.time : wall;
    c.why = it != lost.end()
                ? it->second.why
                : cat("its ddprun did not rejoin within join_timeout (", detail::format_duration(s.join_timeout), ")");
    c.nnodes = nnodes;
    c.workers = workers;
    record.changes.push_back(std::move(c));
  }
  for (std::size_t n = 0; n < record.nodes.size(); ++n) {
    const NodeInfo& node = record.nodes[n];
    if (start.previous->node_rank_of(node.agent) >= 0) continue;
    record.changes.push_back({MembershipChange::Kind::Joined, node.agent, static_cast<int>(n), node.host, node.pid,
                              wall, "", nnodes, workers});
  }
}

// The round's record as the coordinator decided it (`decision`: Close or Fail).
RoundRecord close_round(Store& store, const RendezvousSettings& s, int round, const RoundStart& start,
                        const std::vector<NodeWatch::Node>& expected, const std::map<int, Loss>& lost,
                        std::vector<int> joined, RoundDecision decision) {
  RoundRecord record;
  record.round = round;
  record.restarts_used = start.restarts_used;
  record.formed = decision == RoundDecision::Close;
  if (record.formed) {
    if (static_cast<int>(joined.size()) > s.max_nodes) joined.resize(static_cast<std::size_t>(s.max_nodes));
    std::vector<std::string> node_keys;
    for (int a : joined) node_keys.push_back(keys::node(a));
    const auto infos = store.multi_get(node_keys);
    for (std::size_t i = 0; i < joined.size(); ++i) record.nodes.push_back(decode_node(infos[i], joined[i]));
  } else {
    record.failure = cat("only ", joined.size(), " of the ", nodes_wanted(s), " nodes that --nnodes=", s.min_nodes, ":",
                         s.max_nodes, " needs ", round == 0 ? "joined the job" : "are left in the job", " at ",
                         s.store_address, " after join_timeout (", detail::format_duration(s.join_timeout), ")");
  }
  add_changes(record, s, start, expected, lost, joined);
  return record;
}

// The coordinator: waits for the round's nodes and writes its record.
RoundRecord form_round(Store& store, const RendezvousSettings& s, int round, const RoundStart& start,
                       const std::function<void()>& check_interrupt) {
  const auto began = Clock::now();
  std::vector<NodeWatch::Node> expected;  // the last round's nodes
  if (start.previous) {
    for (std::size_t n = 0; n < start.previous->nodes.size(); ++n) {
      const NodeInfo& node = start.previous->nodes[n];
      expected.push_back({node.agent, static_cast<int>(n), node.host, node.pid});
    }
  }
  NodeWatch watch(expected, s.silence_limit, s.silence_settings);
  std::map<int, Loss> lost;  // agent -> why it is gone
  if (start.end && start.end->kind == AttemptEnd::Kind::AgentLost && start.end->lost_agent >= 0) {
    lost[start.end->lost_agent] = {start.end->lost_why, start.end->time};
  }
  std::size_t last_joined = 0;
  auto last_arrival = began;
  for (;;) {
    if (check_interrupt) check_interrupt();
    check_round_not_ended(store, round);
    const auto arrivals = static_cast<int>(store.add(keys::kArrivals, 0));
    std::vector<int> joined;
    for (int a = 0; a < arrivals; ++a) {
      if (store.check({keys::round_join(round, a)}) && !vanished(store, a)) joined.push_back(a);
    }
    for (const auto& gone : watch.gone(store)) {
      if (!lost.count(gone.node.agent))
        lost[gone.node.agent] = {"its ddprun " + gone.why, std::chrono::system_clock::now()};
    }
    std::vector<int> pending;
    for (const auto& node : expected) {
      const bool asked = std::find(joined.begin(), joined.end(), node.agent) != joined.end();
      if (!asked && !lost.count(node.agent)) pending.push_back(node.agent);
    }
    const auto now = Clock::now();
    if (joined.size() != last_joined) {
      last_joined = joined.size();
      last_arrival = now;
    }
    const auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d); };
    const RoundDecision decision =
        decide_round(static_cast<int>(joined.size()), static_cast<int>(pending.size()), s.min_nodes, s.max_nodes,
                     ms(now - last_arrival), ms(now - began), s.last_call_timeout, s.join_timeout);
    if (decision == RoundDecision::Wait) {
      wait_for_keys(store, {keys::attempt(round, "end")}, now + 100ms, check_interrupt);
      continue;
    }

    const RoundRecord record = close_round(store, s, round, start, expected, lost, std::move(joined), decision);
    store.set(keys::round(round, "record"), encode(record));
    if (record.formed) store.set(keys::kLatestRound, std::to_string(round));
    return record;
  }
}

}  // namespace

Registration register_agent(Store& store, const RendezvousSettings& s, const std::function<void()>& check_interrupt) {
  const auto deadline = Clock::now() + s.join_timeout;
  if (s.coordinator) store.set(keys::kConfig, s.agreed);
  Registration r;
  r.agent = static_cast<int>(store.add(keys::kArrivals, 1) - 1);
  store.set(keys::node(r.agent), encode_node({s.nproc, s.host, s.pid, r.agent}));
  try {
    if (!wait_for_keys(store, {keys::kConfig}, deadline, check_interrupt)) {
      throw TimeoutError(cat("the job at ", s.store_address, " did not start within ",
                             detail::format_duration(s.join_timeout),
                             ": the ddprun hosting its store never said what "
                             "flags the job has. ",
                             how_to_start(s.backend)));
    }
    const std::string agreed = store.get(keys::kConfig);
    if (agreed != s.agreed) {
      throw MismatchError(cat("this node's flags differ from the first node's: here ", detail::quote(s.agreed, 200),
                              ", there ", detail::quote(agreed, 200), ". ", how_to_start(s.backend)));
    }
  } catch (const Error& e) {
    // Before the first round forms, the others stop at once instead of waiting for their join
    // timeout; a node that comes later with the wrong flags only keeps itself out.
    if (!store.check({keys::kLatestRound})) tell_the_others(store, r.agent, s.host, s.pid, e.what());
    throw;
  }
  r.first_round = next_round(store);
  return r;
}

RoundDecision decide_round(int joined, int pending, int min_nodes, int max_nodes,
                           std::chrono::milliseconds since_arrival, std::chrono::milliseconds elapsed,
                           std::chrono::milliseconds last_call_timeout, std::chrono::milliseconds join_timeout) {
  if (joined >= max_nodes) return RoundDecision::Close;
  if (elapsed >= join_timeout) return joined >= min_nodes ? RoundDecision::Close : RoundDecision::Fail;
  if (joined >= min_nodes && pending == 0 && since_arrival >= last_call_timeout) return RoundDecision::Close;
  return RoundDecision::Wait;
}

RoundRecord join_round(Store& store, const RendezvousSettings& s, int agent, int round, const RoundStart& start,
                       const std::function<void()>& check_interrupt,
                       const std::function<void(const RoundRecord&)>& waiting) {
  // A member of the last round hears from the coordinator within its join_timeout of starting to
  // form the round (which may start a grace period late); a newcomer waits join_timeout for room.
  const auto deadline = Clock::now() + s.join_timeout + (start.previous ? 60s : 0s);
  bool said_waiting = false;
  for (;; ++round) {
    store.set(keys::round_join(round, agent), "1");
    if (s.coordinator) return form_round(store, s, round, start, check_interrupt);
    const std::string record_key = keys::round(round, "record");
    for (;;) {
      if (check_interrupt) check_interrupt();
      check_round_not_ended(store, round);
      check_job_open(store);
      if (store.check({record_key})) break;
      if (Clock::now() >= deadline) {
        throw TimeoutError(cat("no round of the job at ", s.store_address, " took this node within join_timeout (",
                               detail::format_duration(s.join_timeout), "): it has its ", s.max_nodes,
                               " nodes (--nnodes=", s.min_nodes, ":", s.max_nodes,
                               "), and none left. Raise MAX, or start this node when one is lost."));
      }
      wait_for_keys(store, {record_key}, std::min(deadline, Clock::now() + 200ms), check_interrupt);
    }
    RoundRecord record = decode_round_record(store.get(record_key));
    if (!record.formed || record.node_rank_of(agent) >= 0) return record;
    if (!said_waiting && waiting) waiting(record);
    said_waiting = true;
  }
}

std::function<std::optional<AttemptEnd>(Store&)> round_watch(NodeWatch others, std::vector<int> members, bool room,
                                                             int round, AttemptEnd reporter) {
  auto watch = std::make_shared<NodeWatch>(std::move(others));
  return [watch, members = std::move(members), room, round,
          me = std::move(reporter)](Store& store) -> std::optional<AttemptEnd> {
    AttemptEnd reporter = me;
    reporter.time = std::chrono::system_clock::now();
    if (auto lost = find_lost_agent(*watch, store, reporter)) return lost;
    if (!room || store.add(keys::attempt(round, "succeeded"), 0) > 0) return std::nullopt;
    const auto arrivals = static_cast<int>(store.add(keys::kArrivals, 0));
    for (int agent = 0; agent < arrivals; ++agent) {
      if (std::find(members.begin(), members.end(), agent) != members.end()) continue;
      if (!store.check({keys::round_join(round + 1, agent)}) || vanished(store, agent)) continue;
      const NodeInfo node = decode_node(store.get(keys::node(agent)), agent);
      AttemptEnd waiting = reporter;
      waiting.kind = AttemptEnd::Kind::NodeWaiting;
      waiting.what =
          cat("a node (host ", node.host, ", pid ", node.pid, ", ", node.nproc, " worker", node.nproc == 1 ? "" : "s",
              ") is waiting to join: the group re-forms with it. The workers "
              "are told first (SIGTERM, then --grace_period); a membership change uses no restart");
      return waiting;
    }
    return std::nullopt;
  };
}

void close_job(Store& store, const std::string& outcome, bool succeeded) {
  try {
    store.set(keys::kClosed, cat(succeeded ? "1" : "0", "\n", outcome));
  } catch (const Error&) {
  }
}

}  // namespace ddp::launcher
