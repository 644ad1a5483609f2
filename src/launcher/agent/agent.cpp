#include "agent/agent.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

#include "agent/agent_state.h"
#include "util/strings.h"
#include "ddp/error.h"
#include "rendezvous/store_keys.h"
#include "reports/agent_report.h"
#include "reports/summary.h"
#include "workers/worker_output.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void say(const std::string& text) { write_fully(STDERR_FILENO, "ddprun: " + text + "\n"); }

namespace {

// The width of ddprun's stdout when it is a terminal (then local rank 0 gets a terminal of its
// own, so that a progress bar shows as a bar); 0 when it is a file or a pipe.
int terminal_width() {
  if (::isatty(STDOUT_FILENO) != 1) return 0;
  winsize size{};
  return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0 ? size.ws_col : 80;
}

// The flags every node must share, as one comparable line.
std::string agreed_flags(const JobConfig& c) {
  return cat("nnodes=", c.min_nodes, ":", c.max_nodes, " max_restarts=", c.max_restarts,
             " rdzv_backend=", c.backend == RdzvBackend::Static ? "static" : "c10d");
}

RendezvousSettings rendezvous_settings(const JobConfig& config, bool coordinator, const std::string& store_address,
                                       const std::string& host) {
  RendezvousSettings s;
  s.backend = config.backend;
  s.min_nodes = config.min_nodes;
  s.max_nodes = config.max_nodes;
  s.node_rank = config.node_rank;
  s.nproc = config.nproc;
  s.coordinator = coordinator;
  s.agreed = agreed_flags(config);
  s.join_timeout = config.join_timeout;
  s.last_call_timeout = config.last_call_timeout;
  s.store_address = store_address;
  s.host = host;
  s.pid = ::getpid();
  s.silence_limit = config.silence_limit();
  s.silence_settings = cat("keep_alive_interval=", detail::format_duration(config.keep_alive_interval),
                           " x keep_alive_max_attempt=", config.keep_alive_max_attempt);
  return s;
}

}  // namespace

Agent::Agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard)
    : config_(config), command_(command), signals_(signals), guard_(guard), terminal_width_(terminal_width()) {
  host_ = detail::local_hostname();
  check_interrupt_ = [this] {
    if (auto sig = signals_.take_termination()) throw Interrupted{*sig};
  };
}

int Agent::run() {
  start_store();
  try {
    join();
  } catch (const Interrupted& i) {
    say(cat("received ", signal_name(i.signal), " before the job started; no worker was started"));
    return 128 + i.signal;
  } catch (const JobClosed& closed) {
    say(cat("the job ", closed.outcome, " before a round had room for this node; nothing ran here"));
    leave_job(*store_, {}, false, 10s);
    return closed.succeeded ? 0 : 1;
  }
  for (;;) {
    const Outcome outcome = run_attempt(round_);
    if (outcome.next_round) {
      if (auto exit_code = next_round(outcome)) return finish_job(*exit_code);
      continue;
    }
    return finish_job(outcome.exit_code);
  }
}

AttemptEnd Agent::reporter() const {
  AttemptEnd r;
  r.node_rank = membership_.node_rank;
  r.host = host_;
  r.agent_pid = ::getpid();
  r.time = std::chrono::system_clock::now();
  return r;
}

void Agent::start_store() {
  using Role = JobConfig::StoreRole;
  // Before anything waits on it: a name that does not resolve would leave the workers (and the
  // other nodes) retrying silently until their timeouts.
  check_resolves(config_.store_host, config_.store_host_source);
  const std::string port_flag = config_.backend == RdzvBackend::Static ? "--master_port" : "--rdzv_endpoint";
  if (config_.store_role == Role::Host) {
    server_ = host_store(config_.store_port, config_.run_id, port_flag);
  } else if (config_.store_role == Role::HostIfLocal && is_local_address(config_.store_host)) {
    try {
      server_ = host_store(config_.store_port, config_.run_id, port_flag);
    } catch (const InvalidArgument&) {
      // Another ddprun of this machine hosts it (it got there first): join it as a client.
    }
  }
  connect_host_ = server_ ? "127.0.0.1" : config_.store_host;
  port_ = server_ ? server_->port() : config_.store_port;
  store_address_ = cat(config_.store_host, ":", port_);
}

void Agent::join() {
  const auto deadline = Clock::now() + config_.join_timeout;
  auto joining = connect_store(connect_host_, port_, config_.run_id, -1, deadline, check_interrupt_);
  rdzv_ = rendezvous_settings(config_, coordinator(), store_address_, host_);
  if (config_.max_nodes > 1) {
    say(cat(coordinator() ? "hosting" : "joining", " job ", detail::quote(config_.run_id), " at ", store_address_,
            "; waiting for ",
            config_.min_nodes == config_.max_nodes ? cat(config_.max_nodes)
                                                   : cat(config_.min_nodes, " to ", config_.max_nodes),
            " nodes"));
  }
  int first_round = 0;
  if (config_.elastic()) {
    const Registration registration = register_agent(*joining, rdzv_, check_interrupt_);
    agent_ = registration.agent;
    first_round = registration.first_round;
  } else {
    membership_ = rendezvous(*joining, rdzv_, check_interrupt_);
    agent_ = membership_.agent;
  }
  connect_as_agent(std::move(joining));
  if (!config_.elastic()) {
    say_place();
    return;
  }
  join_first_round(first_round);
}

// From here on this agent is known to the store by its agent id: if it vanishes (or its
// heartbeat stops), the store records it and the coordinator ends the attempt.
void Agent::connect_as_agent(std::shared_ptr<TCPStore> joining) {
  store_ = connect_store(connect_host_, port_, config_.run_id, kAgentRankBase + agent_, Clock::now() + 30s,
                         check_interrupt_);
  // A store that answers no request for as long as a node may stay silent is gone (a cut
  // network): this node must not spend a minute on each request before it stops its workers.
  store_->set_timeout(std::max<std::chrono::milliseconds>(config_.silence_limit(), 10s));
  joining.reset();
  heartbeat_ = std::make_unique<Heartbeat>(store_->clone(), keys::beat(agent_), config_.keep_alive_interval,
                                           config_.silence_limit());
}

void Agent::join_first_round(int first_round) {
  if (first_round > 0) {  // the job runs already: this node waits for the next round
    say_waiting(decode_round_record(store_->get(keys::round(first_round - 1, "record"))));
  }
  RoundRecord first;
  try {
    first = join_round(*store_, rdzv_, agent_, first_round, {}, check_interrupt_,
                       [this](const RoundRecord& full) { say_waiting(full); });
  } catch (const AttemptEndedEarly& early) {
    throw Error(cat("the job could not start: ", early.end.what));
  }
  if (!first.formed) {
    throw TimeoutError(
        cat(first.failure, ". ", how_to_start(rdzv_.backend), " (--rdzv_conf join_timeout=SECONDS waits longer.)"));
  }
  enter_round(first);
}

// This node's place in the job, for a job of several nodes or rounds.
void Agent::say_place() const {
  const std::optional<int> round = record_ ? std::optional<int>(record_->round) : std::nullopt;
  if (const std::string line = place_line(membership_, config_.nproc, round); !line.empty()) say(line);
}

void Agent::say_waiting(const RoundRecord& full) const {
  say(waiting_line(full, config_.min_nodes, config_.max_nodes));
}

// An elastic round as formed: this node's place in it, and what changed.
void Agent::enter_round(const RoundRecord& record) {
  previous_world_ = std::max(previous_world_, membership_.world_size());
  round_ = record.round;
  restarts_used_ = record.restarts_used;
  membership_.agent = agent_;
  membership_.node_rank = record.node_rank_of(agent_);
  membership_.nnodes = static_cast<int>(record.nodes.size());
  membership_.nodes = record.nodes;
  for (const auto& change : record.changes) {
    say(describe(change));
    history_.push_back(change);
  }
  record_ = record;
  say_place();
}

// After an attempt that does not end the job. Static: the same nodes again. Elastic: the next
// round, formed anew. Returns ddprun's exit status when the job ends instead.
std::optional<int> Agent::next_round(const Outcome& outcome) {
  if (!config_.elastic()) {
    ++round_;
    ++restarts_used_;
    return std::nullopt;
  }
  const RoundStart start{record_, outcome.end, restarts_used_ + (outcome.uses_restart ? 1 : 0)};
  RoundRecord record;
  try {
    record = join_round(*store_, rdzv_, agent_, round_ + 1, start, check_interrupt_,
                        [this](const RoundRecord& full) { say_waiting(full); });
  } catch (const Interrupted& i) {
    // The others are forming the round: tell them, through its attempt, that this node will not.
    AttemptChannel next(*store_, membership_, coordinator(), round_ + 1, reporter());
    publish(next, interrupted(i.signal));
    say(cat("received ", signal_name(i.signal), " between rounds; no worker is running"));
    return 128 + i.signal;
  } catch (const AttemptEndedEarly& early) {
    if (early.end.kind == AttemptEnd::Kind::Interrupted) {
      print_stop_report(early.end, {});
      return 128 + early.end.signal;
    }
    print_summary(early.end, {}, false);
    return 1;
  } catch (const JobClosed& closed) {
    say(cat("the job ", closed.outcome, " while this node waited for a round"));
    return closed.succeeded ? 0 : 1;
  } catch (const Error& e) {
    store_gone_ = true;
    print_summary(store_lost(e), {}, false);
    return 1;
  }
  if (!record.formed) return round_not_formed(record);
  enter_round(record);
  return std::nullopt;
}

// A round that could not form ends the job.
std::optional<int> Agent::round_not_formed(const RoundRecord& record) {
  for (const auto& change : record.changes) history_.push_back(change);
  AttemptEnd end = reporter();
  end.kind = AttemptEnd::Kind::AgentLost;
  end.what = cat("the job cannot go on: ", record.failure);
  restarts_used_ = record.restarts_used;
  print_summary(end, {}, false);
  return 1;
}

// The job is over: the success report of an elastic job that changed, leaving in order.
int Agent::finish_job(int exit_code) {
  if (exit_code == 0) {
    write_fully(STDERR_FILENO, success_report(records_.last_straggler_report(), round_, membership_, history_));
  }
  if (store_gone_) return exit_code;
  const std::vector<int> others = agents_to_outlast(exit_code);
  leave_job(*store_, others, coordinator(), 10s);
  return exit_code;
}

// The agents the store must outlive: every node but this one (elastic: every one that came, but
// those already lost, which will not say goodbye). The elastic coordinator closes the job first.
std::vector<int> Agent::agents_to_outlast(int exit_code) {
  std::vector<int> others;
  if (!config_.elastic()) {
    for (int n = 0; n < membership_.nnodes; ++n) {
      if (n != agent_) others.push_back(n);
    }
  } else if (coordinator()) {
    close_job(*store_, exit_code == 0 ? "succeeded" : "ended", exit_code == 0);
    try {
      const auto arrivals = static_cast<int>(store_->add(keys::kArrivals, 0));
      for (int a = 0; a < arrivals; ++a) {
        const bool lost = std::any_of(history_.begin(), history_.end(), [&](const MembershipChange& c) {
          return c.agent == a && c.kind == MembershipChange::Kind::Lost;
        });
        if (a != agent_ && !lost) others.push_back(a);
      }
    } catch (const Error&) {
    }
  }
  return others;
}

int run_agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard) {
  Agent agent(config, command, signals, guard);
  return agent.run();
}

}  // namespace ddp::launcher
