// One attempt of this node's workers, in step with the other nodes: the start barrier, the
// workers (workers/), what ends the attempt (the event switch), and what follows its end
// (reports/: the failure summary or the stop report; or another attempt).
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "agent/agent_state.h"
#include "records/failure_record.h"
#include "util/strings.h"
#include "reports/agent_report.h"
#include "reports/attempt_records.h"
#include "reports/flight_report.h"
#include "reports/summary.h"
#include "workers/worker_notes.h"
#include "workers/worker_output.h"
#include "workers/worker_specs.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;

Agent::Outcome Agent::run_attempt(int attempt) {
  AttemptChannel channel(*store_, membership_, coordinator(), attempt, reporter());
  if (auto stopped = start_barrier(channel)) return *stopped;
  if (!notes_said_) openblas_coretype_ = say_worker_notes(process_env(), config_.nproc, say);
  notes_said_ = true;
  RoundWorkers workers = worker_specs({.config = config_,
                                       .command = command_,
                                       .membership = membership_,
                                       .round = attempt,
                                       .port = port_,
                                       .records = records_,
                                       .terminal_width = terminal_width_,
                                       .openblas_coretype = openblas_coretype_});
  flight_dir_ = workers.flight_dir;
  // A failure record of an earlier attempt's worker of the same rank is no evidence of this one's.
  for (const WorkerSpec& spec : workers.specs) detail::clear_failure(*store_, spec.rank);
  WorkerGroup group(std::move(workers.specs), signals_, guard_);
  int signal_received = 0;
  AttemptEnd end;
  {
    EndWatcher watcher(store_->clone(), {.end_key = channel.end_key(),
                                         .look = coordinator() ? watch_round() : nullptr,
                                         .heartbeat = heartbeat_.get(),
                                         .interval = config_.monitor_interval,
                                         .request_timeout = config_.silence_limit(),
                                         .store_address = store_address_,
                                         .reporter = reporter()});
    try {
      group.start();
    } catch (const Error& e) {  // a log file that cannot be created
      say(cat("error: ", e.what()));
      publish(channel, agent_failed(e.what()));
      group.stop(SIGKILL, 0ms);
      return {false, 1};
    }
    group.bound_stopped(config_.stopped_timeout, membership_.world_size(),
                        [&] { return membership_.nnodes == 1 || others_succeeded(channel); });
    const WorkerGroup::Wakeup wakeup = wait_for_event(group, watcher.fd());
    end = end_of(group, wakeup, channel, watcher, attempt, signal_received);
  }
  if (!signal_received && group.received_signal()) signal_received = *group.received_signal();
  return after_attempt(end, group.exits(), signal_received);
}

// Every node's workers start together; nullopt when this node's may start.
std::optional<Agent::Outcome> Agent::start_barrier(AttemptChannel& channel) {
  try {
    NodeWatch others = watch_others();
    channel.start_barrier(config_.join_timeout, check_interrupt_, &others,
                          std::max(previous_world_, membership_.world_size()));
  } catch (const Interrupted& i) {
    publish(channel, interrupted(i.signal));
    say(cat("received ", signal_name(i.signal), " between attempts; no worker is running"));
    return Outcome{false, 128 + i.signal};
  } catch (const AttemptEndedEarly& early) {
    if (early.end.kind == AttemptEnd::Kind::Interrupted) {
      print_stop_report(early.end, {});
      return Outcome{false, 128 + early.end.signal};
    }
    return after_attempt(early.end, {}, 0);
  } catch (const Error& e) {
    say(cat("error: ", e.what()));
    publish(channel, agent_failed(e.what()));
    return Outcome{false, 1};
  }
  return std::nullopt;
}

// The workers' first event that ends the attempt; a worker stopped alone is only said.
WorkerGroup::Wakeup Agent::wait_for_event(WorkerGroup& group, int watch_fd) {
  for (;;) {
    const WorkerGroup::Wakeup wakeup = group.wait(watch_fd);
    if (wakeup.event == WorkerGroup::Event::StoppedAlone) {
      say(stopped_alone_notice(group, config_.stopped_timeout));
    } else if (wakeup.event == WorkerGroup::Event::Resumed) {
      say("the stopped worker runs again: waiting for it to finish");
    } else {
      return wakeup;
    }
  }
}

// The attempt's end for the event that ended it here, with this node's workers stopped.
AttemptEnd Agent::end_of(WorkerGroup& group, const WorkerGroup::Wakeup& wakeup, AttemptChannel& channel,
                         EndWatcher& watcher, int attempt, int& signal_received) {
  AttemptEnd end;
  switch (wakeup.event) {
    case WorkerGroup::Event::StoppedAlone:
    case WorkerGroup::Event::Resumed:
    case WorkerGroup::Event::StoppedTooLong:
      end = publish(channel, stopped_too_long_end(group, reporter(), config_.stopped_timeout));
      group.stop(SIGTERM, config_.grace_period);
      break;
    case WorkerGroup::Event::WorkerFailed:
      end = publish(channel, worker_failed_end(group, reporter(), membership_,
                                               [&](int rank) { return detail::read_failure(*store_, rank); }));
      group.stop(SIGTERM, config_.grace_period);
      break;
    case WorkerGroup::Event::Signal:
      signal_received = wakeup.signal;
      end = publish(channel, interrupted(wakeup.signal));
      group.find_suspended();
      group.stop(wakeup.signal, config_.grace_period);
      break;
    case WorkerGroup::Event::External:
      end = *watcher.end();
      if (end.kind == AttemptEnd::Kind::NodeWaiting) say(cat("round ", attempt, " ends: ", end.what));
      group.find_suspended();
      group.stop(SIGTERM, config_.grace_period);
      break;
    case WorkerGroup::Event::AllSucceeded:
      group.stop(SIGTERM, config_.grace_period);  // what the workers' own children left running
      end = succeed(channel, watcher, signal_received);
      break;
  }
  return end;
}

// This node's workers all succeeded: says so, and waits for the attempt's end.
AttemptEnd Agent::succeed(AttemptChannel& channel, EndWatcher& watcher, int& signal_received) {
  try {
    AttemptEnd success = reporter();
    success.kind = AttemptEnd::Kind::Succeeded;
    channel.report_success(success);
    return wait_for_end(channel, watcher, signal_received);
  } catch (const Error& e) {
    return store_lost(e);
  }
}

// After this node's workers all succeeded: waits for the attempt's end (or a signal).
AttemptEnd Agent::wait_for_end(AttemptChannel& channel, EndWatcher& watcher, int& signal_received) {
  for (;;) {
    if (auto end = watcher.end()) return *end;
    pollfd fds[2] = {{watcher.fd(), POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
    ::poll(fds, 2, 1000);
    if (auto sig = signals_.take_termination()) {
      signal_received = *sig;
      return publish(channel, interrupted(*sig));
    }
  }
}

// What follows an attempt's end: the job's end (with its report), or another attempt.
Agent::Outcome Agent::after_attempt(const AttemptEnd& end, const std::vector<WorkerExit>& local, int signal_received) {
  using Kind = AttemptEnd::Kind;
  if (end.kind == Kind::StoreLost) store_gone_ = true;  // nobody is left to say goodbye to
  if (end.kind == Kind::Succeeded && !signal_received) return {false, 0, end};
  if (end.kind == Kind::Succeeded || end.kind == Kind::Interrupted ||
      (end.kind == Kind::NodeWaiting && signal_received)) {
    // A requested stop, here or on another node: not a failure.
    const AttemptEnd stop = end.kind == Kind::Interrupted ? end : interrupted(signal_received);
    print_stop_report(stop, local);
    return {false, 128 + stop.signal, end};
  }
  if (end.kind == Kind::NodeWaiting) return {true, 0, end, false};  // a membership change, not a failure

  const bool elastic = config_.elastic();
  const bool restarts_left = end.restartable(elastic) && restarts_used_ < config_.max_restarts;
  print_summary(end, local, restarts_left && !signal_received);
  if (signal_received && restarts_left) {
    // The other nodes will restart: tell them, at the next attempt's barrier, that this one will not.
    AttemptChannel next(*store_, membership_, coordinator(), round_ + 1, reporter());
    publish(next, interrupted(signal_received));
  }
  if (restarts_left && !signal_received) return {true, 0, end, true};
  return {false, signal_received ? 128 + signal_received : 1, end};
}

// Publishes `end` unless the attempt already ended; a lost store leaves `end` as it is.
AttemptEnd Agent::publish(AttemptChannel& channel, const AttemptEnd& end) {
  try {
    return channel.publish_end(end);
  } catch (const Error& e) {
    return store_lost(e);
  }
}

AttemptEnd Agent::store_lost(const Error& e) const { return store_lost_end(reporter(), store_address_, e.what()); }

AttemptEnd Agent::interrupted(int sig) const {
  AttemptEnd end = reporter();
  end.kind = AttemptEnd::Kind::Interrupted;
  end.signal = sig;
  end.what = cat("ddprun on node ", membership_.node_rank, " (host ", host_, ", pid ", ::getpid(), ") received ",
                 signal_name(sig), " and stopped the job");
  return end;
}

AttemptEnd Agent::agent_failed(const std::string& why) const {
  AttemptEnd end = reporter();
  end.kind = AttemptEnd::Kind::AgentFailed;
  end.what = cat("ddprun on node ", membership_.node_rank, " (host ", host_, ", pid ", ::getpid(), ") failed: ", why);
  return end;
}

// Whether every other node's workers have exited 0 (asked for a worker stopped alone).
bool Agent::others_succeeded(AttemptChannel& channel) const {
  try {
    return channel.nodes_succeeded() >= membership_.nnodes - 1;
  } catch (const Error&) {
    return false;  // the store is gone: the watcher says so
  }
}

// The other nodes of the round, for the coordinator's watch over them.
NodeWatch Agent::watch_others() const {
  std::vector<NodeWatch::Node> others;
  for (int n = 0; n < membership_.nnodes; ++n) {
    const NodeInfo& node = membership_.nodes[static_cast<std::size_t>(n)];
    if (n != membership_.node_rank) others.push_back({node.agent, n, node.host, node.pid});
  }
  return NodeWatch(std::move(others), config_.silence_limit(), rdzv_.silence_settings);
}

// The coordinator's look while the round runs (see round_watch).
std::function<std::optional<AttemptEnd>(Store&)> Agent::watch_round() const {
  std::vector<int> members;
  for (const auto& node : membership_.nodes) members.push_back(node.agent);
  const bool room = config_.elastic() && membership_.nnodes < config_.max_nodes;
  return round_watch(watch_others(), std::move(members), room, round_, reporter());
}

void Agent::print_stop_report(const AttemptEnd& stop, const std::vector<WorkerExit>& local) {
  StopInput in;
  in.signal = stop.signal;
  in.what = stop.what;
  in.local = local;
  in.node_rank = membership_.node_rank;
  in.host = host_;
  in.grace_period = config_.grace_period;
  std::vector<int> ranks;
  for (int local = 0; local < config_.nproc; ++local) ranks.push_back(membership_.rank_offset() + local);
  std::vector<std::string> problems;
  in.checkpoint = records_.latest(ranks, problems);
  for (const auto& problem : problems) say("note: " + problem);
  in.command = config_.command_line;
  in.straggler = records_.last_straggler_report();
  in.history = history_lines(history_);
  write_fully(STDERR_FILENO, format_stop_report(in));
}

void Agent::print_summary(const AttemptEnd& end, const std::vector<WorkerExit>& local, bool restarting) {
  SummaryInput in;
  in.root = end;
  in.local = local;
  in.node_rank = membership_.node_rank;
  in.host = host_;
  in.attempt = restarts_used_;
  in.max_restarts = config_.max_restarts;
  in.restarting = restarting;
  in.straggler = records_.last_straggler_report();
  in.history = history_lines(history_);
  std::vector<int> ranks;
  for (const WorkerExit& w : local) ranks.push_back(w.rank);
  write_fully(STDERR_FILENO, format_summary(in) + format_flight_report(flight_dir_, ranks, membership_.world_size()));
}

}  // namespace ddp::launcher
