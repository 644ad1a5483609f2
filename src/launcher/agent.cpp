#include "agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>

#include "agent_report.h"
#include "attempt_channel.h"
#include "attempt_records.h"
#include "checkpoint_record.h"
#include "ddp/error.h"
#include "elastic_rendezvous.h"
#include "flight_report.h"
#include "heartbeat.h"
#include "openblas.h"
#include "rendezvous.h"
#include "round_record.h"
#include "store_host.h"
#include "store_keys.h"
#include "summary.h"
#include "ddp/detail/strings.h"
#include "worker_env.h"
#include "worker_group.h"
#include "worker_output.h"
#include "worker_specs.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

void say(const std::string& text) { write_fully(STDERR_FILENO, "ddprun: " + text + "\n"); }

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

class Agent {
 public:
  Agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard)
      : config_(config), command_(command), signals_(signals), guard_(guard), terminal_width_(terminal_width()) {
    host_ = detail::local_hostname();
    check_interrupt_ = [this] {
      if (auto sig = signals_.take_termination()) throw Interrupted{*sig};
    };
  }

  int run() {
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

 private:
  struct Outcome {
    bool next_round = false;
    int exit_code = 0;
    AttemptEnd end;
    bool uses_restart = false;
  };

  bool coordinator() const { return server_ != nullptr; }

  AttemptEnd reporter() const {
    AttemptEnd r;
    r.node_rank = membership_.node_rank;
    r.host = host_;
    r.agent_pid = ::getpid();
    r.time = std::chrono::system_clock::now();
    return r;
  }

  void start_store() {
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

  void join() {
    const auto deadline = Clock::now() + config_.join_timeout;
    auto joining = connect_store(connect_host_, port_, config_.run_id, -1, deadline, check_interrupt_);
    RendezvousSettings& s = rdzv_;
    s.backend = config_.backend;
    s.min_nodes = config_.min_nodes;
    s.max_nodes = config_.max_nodes;
    s.node_rank = config_.node_rank;
    s.nproc = config_.nproc;
    s.coordinator = coordinator();
    s.agreed = agreed_flags(config_);
    s.join_timeout = config_.join_timeout;
    s.last_call_timeout = config_.last_call_timeout;
    s.store_address = store_address_;
    s.host = host_;
    s.pid = ::getpid();
    s.silence_limit = config_.silence_limit();
    s.silence_settings = cat("keep_alive_interval=", detail::format_duration(config_.keep_alive_interval),
                             " x keep_alive_max_attempt=", config_.keep_alive_max_attempt);
    if (config_.max_nodes > 1) {
      say(cat(coordinator() ? "hosting" : "joining", " job ", detail::quote(config_.run_id), " at ", store_address_,
              "; waiting for ",
              config_.min_nodes == config_.max_nodes ? cat(config_.max_nodes)
                                                     : cat(config_.min_nodes, " to ", config_.max_nodes),
              " nodes"));
    }
    int first_round = 0;
    if (config_.elastic()) {
      const Registration registration = register_agent(*joining, s, check_interrupt_);
      agent_ = registration.agent;
      first_round = registration.first_round;
    } else {
      membership_ = rendezvous(*joining, s, check_interrupt_);
      agent_ = membership_.agent;
    }
    // From here on this agent is known to the store by its agent id: if it vanishes (or its
    // heartbeat stops), the store records it and the coordinator ends the attempt.
    store_ = connect_store(connect_host_, port_, config_.run_id, kAgentRankBase + agent_, Clock::now() + 30s,
                           check_interrupt_);
    // A store that answers no request for as long as a node may stay silent is gone (a cut
    // network): this node must not spend a minute on each request before it stops its workers.
    store_->set_timeout(std::max<std::chrono::milliseconds>(config_.silence_limit(), 10s));
    joining.reset();
    heartbeat_ = std::make_unique<Heartbeat>(store_->clone(), keys::beat(agent_), config_.keep_alive_interval,
                                             config_.silence_limit());
    if (!config_.elastic()) {
      say_place();
      return;
    }
    if (first_round > 0) {  // the job runs already: this node waits for the next round
      say_waiting(decode_round_record(store_->get(keys::round(first_round - 1, "record"))));
    }
    RoundRecord first;
    try {
      first = join_round(*store_, s, agent_, first_round, {}, check_interrupt_,
                         [this](const RoundRecord& full) { say_waiting(full); });
    } catch (const AttemptEndedEarly& early) {
      throw Error(cat("the job could not start: ", early.end.what));
    }
    if (!first.formed) {
      throw TimeoutError(
          cat(first.failure, ". ", how_to_start(s.backend), " (--rdzv_conf join_timeout=SECONDS waits longer.)"));
    }
    enter_round(first);
  }

  // This node's place in the job, for a job of several nodes or rounds.
  void say_place() const {
    const std::optional<int> round = record_ ? std::optional<int>(record_->round) : std::nullopt;
    if (const std::string line = place_line(membership_, config_.nproc, round); !line.empty()) say(line);
  }

  void say_waiting(const RoundRecord& full) const { say(waiting_line(full, config_.min_nodes, config_.max_nodes)); }

  // An elastic round as formed: this node's place in it, and what changed.
  void enter_round(const RoundRecord& record) {
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
  std::optional<int> next_round(const Outcome& outcome) {
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
    if (!record.formed) {
      for (const auto& change : record.changes) history_.push_back(change);
      AttemptEnd end = reporter();
      end.kind = AttemptEnd::Kind::AgentLost;
      end.what = cat("the job cannot go on: ", record.failure);
      restarts_used_ = record.restarts_used;
      print_summary(end, {}, false);
      return 1;
    }
    enter_round(record);
    return std::nullopt;
  }

  // The job is over: the success report of an elastic job that changed, leaving in order.
  int finish_job(int exit_code) {
    if (exit_code == 0) {
      write_fully(STDERR_FILENO, success_report(records_.last_straggler_report(), round_, membership_, history_));
    }
    if (store_gone_) return exit_code;
    // The agents the store must outlive: every node but this one (elastic: every one that came,
    // but those already lost, which will not say goodbye).
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
    leave_job(*store_, others, coordinator(), 10s);
    return exit_code;
  }

  // Publishes `end` unless the attempt already ended; a lost store leaves `end` as it is.
  AttemptEnd publish(AttemptChannel& channel, const AttemptEnd& end) {
    try {
      return channel.publish_end(end);
    } catch (const Error& e) {
      return store_lost(e);
    }
  }

  AttemptEnd store_lost(const Error& e) const { return store_lost_end(reporter(), store_address_, e.what()); }

  AttemptEnd interrupted(int sig) const {
    AttemptEnd end = reporter();
    end.kind = AttemptEnd::Kind::Interrupted;
    end.signal = sig;
    end.what = cat("ddprun on node ", membership_.node_rank, " (host ", host_, ", pid ", ::getpid(), ") received ",
                   signal_name(sig), " and stopped the job");
    return end;
  }

  AttemptEnd agent_failed(const std::string& why) const {
    AttemptEnd end = reporter();
    end.kind = AttemptEnd::Kind::AgentFailed;
    end.what = cat("ddprun on node ", membership_.node_rank, " (host ", host_, ", pid ", ::getpid(), ") failed: ", why);
    return end;
  }

  // Whether every other node's workers have exited 0 (asked for a worker stopped alone).
  bool others_succeeded(AttemptChannel& channel) const {
    try {
      return channel.nodes_succeeded() >= membership_.nnodes - 1;
    } catch (const Error&) {
      return false;  // the store is gone: the watcher says so
    }
  }

  // After this node's workers all succeeded: waits for the attempt's end (or a signal).
  AttemptEnd wait_for_end(AttemptChannel& channel, EndWatcher& watcher, int& signal_received) {
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

  // The other nodes of the round, for the coordinator's watch over them.
  std::vector<NodeWatch::Node> other_nodes() const {
    std::vector<NodeWatch::Node> others;
    for (int n = 0; n < membership_.nnodes; ++n) {
      const NodeInfo& node = membership_.nodes[static_cast<std::size_t>(n)];
      if (n != membership_.node_rank) others.push_back({node.agent, n, node.host, node.pid});
    }
    return others;
  }

  NodeWatch watch_others() const { return NodeWatch(other_nodes(), config_.silence_limit(), rdzv_.silence_settings); }

  // The coordinator's look while the round runs (see round_watch).
  std::function<std::optional<AttemptEnd>(Store&)> watch_round() const {
    std::vector<int> members;
    for (const auto& node : membership_.nodes) members.push_back(node.agent);
    const bool room = config_.elastic() && membership_.nnodes < config_.max_nodes;
    return round_watch(watch_others(), std::move(members), room, round_, reporter());
  }

  Outcome run_attempt(int attempt) {
    AttemptChannel channel(*store_, membership_, coordinator(), attempt, reporter());
    try {
      NodeWatch others = watch_others();
      channel.start_barrier(config_.join_timeout, check_interrupt_, &others,
                            std::max(previous_world_, membership_.world_size()));
    } catch (const Interrupted& i) {
      publish(channel, interrupted(i.signal));
      say(cat("received ", signal_name(i.signal), " between attempts; no worker is running"));
      return {false, 128 + i.signal};
    } catch (const AttemptEndedEarly& early) {
      if (early.end.kind == AttemptEnd::Kind::Interrupted) {
        print_stop_report(early.end, {});
        return {false, 128 + early.end.signal};
      }
      return after_attempt(early.end, {}, 0);
    } catch (const Error& e) {
      say(cat("error: ", e.what()));
      publish(channel, agent_failed(e.what()));
      return {false, 1};
    }

    const auto parent = process_env();
    if (!notes_said_ && needs_omp_default(parent, config_.nproc)) {
      say("note: setting OMP_NUM_THREADS=1 for each worker (as torchrun does: more than one worker per node and "
          "OMP_NUM_THREADS is unset), to keep the machine from being overloaded; set it yourself to tune it");
    }
    if (!notes_said_ && !parent("OPENBLAS_CORETYPE")) {
      std::string chosen;
      openblas_coretype_ = openblas_coretype_here(&chosen);
      if (openblas_coretype_) {
        say(cat("note: setting OPENBLAS_CORETYPE=", *openblas_coretype_,
                " for each worker: this machine's OpenBLAS "
                "does not know its CPU and chose its ",
                chosen,
                " kernels, without the CPU's vector units (matrix "
                "products about 3x slower); set OPENBLAS_CORETYPE yourself to choose"));
      }
    }
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
      WorkerGroup::Wakeup wakeup;
      for (;;) {
        wakeup = group.wait(watcher.fd());
        if (wakeup.event == WorkerGroup::Event::StoppedAlone) {
          say(stopped_alone_notice(group, config_.stopped_timeout));
        } else if (wakeup.event == WorkerGroup::Event::Resumed) {
          say("the stopped worker runs again: waiting for it to finish");
        } else {
          break;
        }
      }
      switch (wakeup.event) {
        case WorkerGroup::Event::StoppedAlone:
        case WorkerGroup::Event::Resumed:
        case WorkerGroup::Event::StoppedTooLong: {
          end = publish(channel, stopped_too_long_end(group, reporter(), config_.stopped_timeout));
          group.stop(SIGTERM, config_.grace_period);
          break;
        }
        case WorkerGroup::Event::WorkerFailed: {
          AttemptEnd failed = reporter();
          failed.kind = AttemptEnd::Kind::WorkerFailed;
          const std::size_t index = *group.failed_worker();
          failed.worker = group.exits()[index];
          failed.blame =
              blame_for(group, index, membership_, [&](int rank) { return detail::read_failure(*store_, rank); });
          end = publish(channel, failed);
          group.stop(SIGTERM, config_.grace_period);
          break;
        }
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
          try {
            AttemptEnd success = reporter();
            success.kind = AttemptEnd::Kind::Succeeded;
            channel.report_success(success);
            end = wait_for_end(channel, watcher, signal_received);
          } catch (const Error& e) {
            end = store_lost(e);
          }
          break;
      }
    }
    if (!signal_received && group.received_signal()) signal_received = *group.received_signal();
    return after_attempt(end, group.exits(), signal_received);
  }

  // What follows an attempt's end: the job's end (with its report), or another attempt.
  Outcome after_attempt(const AttemptEnd& end, const std::vector<WorkerExit>& local, int signal_received) {
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

  void print_stop_report(const AttemptEnd& stop, const std::vector<WorkerExit>& local) {
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

  void print_summary(const AttemptEnd& end, const std::vector<WorkerExit>& local, bool restarting) {
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

  const JobConfig& config_;
  const Command& command_;
  SignalWatch& signals_;
  OrphanGuard* guard_;
  int terminal_width_;
  CheckpointRecords records_;
  std::function<void()> check_interrupt_;
  std::string host_;
  std::unique_ptr<TCPStoreServer> server_;  // declared before the clients: destroyed after them
  std::string connect_host_;
  int port_ = 0;
  std::string store_address_;
  RendezvousSettings rdzv_;
  int agent_ = 0;                                 // this agent's id: its node rank (static), its arrival number (c10d)
  Membership membership_;                         // of the round under way
  int round_ = 0;                                 // the round (attempt) under way: TORCHELASTIC_RESTART_COUNT
  int restarts_used_ = 0;                         // of --max_restarts
  int previous_world_ = 0;                        // the largest world size so far: its ranks' lost records are cleared
  std::optional<RoundRecord> record_;             // elastic: the round under way
  std::vector<MembershipChange> history_;         // elastic: every change so far
  bool notes_said_ = false;                       // the notes on OMP_NUM_THREADS and OPENBLAS_CORETYPE said (once)
  std::optional<std::string> openblas_coretype_;  // for the workers (openblas.h)
  bool store_gone_ = false;                       // this node lost the store: leaving would wait for nothing
  std::shared_ptr<TCPStore> store_;
  std::unique_ptr<Heartbeat> heartbeat_;  // after store_: it beats on a clone of it
  std::string flight_dir_;                // where this attempt's workers write their flight recorder dumps
};

}  // namespace

int run_agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard) {
  Agent agent(config, command, signals, guard);
  return agent.run();
}

}  // namespace ddp::launcher
