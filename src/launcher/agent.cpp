#include "agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "attempt_channel.h"
#include "blame.h"
#include "checkpoint_record.h"
#include "ddp/error.h"
#include "rendezvous.h"
#include "store_host.h"
#include "store_keys.h"
#include "summary.h"
#include "util/strings.h"
#include "worker_env.h"
#include "worker_group.h"
#include "worker_output.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

void say(const std::string& text) { write_fully(STDERR_FILENO, "ddprun: " + text + "\n"); }

std::string safe_name(std::string text) {
  for (char& c : text) {
    if (c == '/' || c == '\0') c = '_';
  }
  return text;
}

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
    }
    for (int attempt = 0;; ++attempt) {
      const Outcome outcome = run_attempt(attempt);
      if (outcome.next_attempt) continue;
      leave_job(*store_, membership_, coordinator(), 10s);
      return outcome.exit_code;
    }
  }

 private:
  struct Outcome {
    bool next_attempt = false;
    int exit_code = 0;
  };

  bool coordinator() const { return server_ != nullptr; }

  AttemptEnd reporter() const {
    AttemptEnd r;
    r.node_rank = membership_.node_rank;
    r.host = host_;
    r.agent_pid = ::getpid();
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
    RendezvousSettings s;
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
    if (config_.max_nodes > 1) {
      say(cat(coordinator() ? "hosting" : "joining", " job ", detail::quote(config_.run_id), " at ", store_address_,
              "; waiting for ", config_.min_nodes == config_.max_nodes ? cat(config_.max_nodes) :
                                                                         cat(config_.min_nodes, " to ", config_.max_nodes),
              " nodes"));
    }
    membership_ = rendezvous(*joining, s, check_interrupt_);
    // From here on this agent is known to the store by its node rank: if it vanishes, the
    // store records it and the coordinator ends the attempt.
    store_ = connect_store(connect_host_, port_, config_.run_id, kAgentRankBase + membership_.node_rank,
                           Clock::now() + 30s, check_interrupt_);
    joining.reset();
    if (membership_.nnodes > 1) {
      const int first = membership_.rank_offset();
      say(cat("node ", membership_.node_rank, " of ", membership_.nnodes, ": ranks ", first, " to ",
              first + config_.nproc - 1, " of ", membership_.world_size()));
    }
  }

  std::vector<WorkerSpec> worker_specs(int attempt) const {
    std::vector<WorkerSpec> specs;
    const auto parent = process_env();
    JobEnv job;
    job.master_addr = config_.master_addr;
    job.master_port = port_;
    job.run_id = config_.run_id;
    job.role = config_.role;
    job.max_restarts = config_.max_restarts;
    const std::string attempt_dir =
        config_.log_dir.empty() ? "" : cat(config_.log_dir, "/", safe_name(config_.run_id), "/attempt_", attempt);
    for (int local = 0; local < config_.nproc; ++local) {
      WorkerPlace place;
      place.rank = membership_.rank_offset() + local;
      place.local_rank = local;
      place.world_size = membership_.world_size();
      place.local_world_size = config_.nproc;
      place.node_rank = membership_.node_rank;
      place.nnodes = membership_.nnodes;
      place.restart_count = attempt;
      if (!attempt_dir.empty()) job.error_file = cat(attempt_dir, "/rank_", place.rank, ".error.json");
      job.checkpoint_record = records_.path_for(place.rank);
      WorkerSpec spec;
      spec.rank = place.rank;
      spec.local_rank = local;
      spec.node_rank = membership_.node_rank;
      spec.path = command_.path;
      spec.argv = command_.argv;
      spec.env = worker_environment(place, job, parent);
      spec.output.rank = place.rank;
      if (!attempt_dir.empty()) spec.output.log_path = cat(attempt_dir, "/rank_", place.rank, ".log");
      bool shown = true;
      if (config_.local_ranks_filter) {
        const auto& f = *config_.local_ranks_filter;
        shown = std::find(f.begin(), f.end(), local) != f.end();
      }
      const int redirected = config_.redirects.for_local_rank(local);
      const int teed = config_.tee.for_local_rank(local);
      for (int s = 0; s < 2; ++s) {
        const int bit = 1 << s;
        spec.output.console[s] = shown && (!(redirected & bit) || (teed & bit));
      }
      spec.output.keep = may_name_ranks_waited_for;  // the evidence find_root_cause reads
      if (local == 0 && terminal_width_ > 0 && spec.output.console[0]) {
        spec.terminal_columns = terminal_width_ - static_cast<int>(cat("[", place.rank, "]:").size());
        spec.output.live_stdout = true;
      }
      specs.push_back(std::move(spec));
    }
    return specs;
  }

  // Publishes `end` unless the attempt already ended; a lost store leaves `end` as it is.
  AttemptEnd publish(AttemptChannel& channel, const AttemptEnd& end) {
    try {
      return channel.publish_end(end);
    } catch (const Error& e) {
      return store_lost(e);
    }
  }

  AttemptEnd store_lost(const Error& e) const {
    AttemptEnd end = reporter();
    end.kind = AttemptEnd::Kind::StoreLost;
    end.what = cat("this node lost the job's store at ", store_address_,
                   ": the ddprun hosting it (the first node's) has exited or cannot be reached (", e.what(), ")");
    return end;
  }

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

  std::string stopped_alone_notice(const WorkerGroup& group) const {
    std::string who, pids;
    const auto& stopped = group.stopped_alone();
    for (const auto& s : stopped) {
      long pid = 0;
      for (const WorkerExit& w : group.exits()) {
        if (w.rank == s.rank) pid = w.pid;
      }
      who += cat(who.empty() ? "" : "; ", "rank ", s.rank, " (pid ", pid, ") is ", s.state);
      pids += cat(" ", pid);
    }
    const char* them = stopped.size() == 1 ? "it" : "them";
    return cat(who, ", and every other worker of the job has exited: no collective is left to time out on ", them,
               " and nothing will continue ", them, ". Continue ", them, " to let ", them, " finish (kill -CONT", pids,
               "); otherwise ddprun ends ", them, " as a failure in ", detail::format_duration(config_.stopped_timeout),
               " (--stopped_timeout).");
  }

  AttemptEnd stopped_too_long(const WorkerGroup& group) const {
    const SuspendedWorker& first = group.stopped_alone().front();
    AttemptEnd end = reporter();
    end.kind = AttemptEnd::Kind::WorkerStopped;
    for (const WorkerExit& w : group.exits()) {
      if (w.rank == first.rank) end.worker = w;
    }
    end.what = cat("rank ", first.rank, " stayed ", first.state, " for ", detail::format_duration(config_.stopped_timeout),
                   " after every other worker of the job had exited: no collective was left to time out on it and "
                   "nothing would continue it, so ddprun ended it (SIGCONT and SIGTERM, then SIGKILL after "
                   "--grace_period) as a failure (--stopped_timeout=",
                   detail::format_duration(config_.stopped_timeout), ")");
    return end;
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

  Outcome run_attempt(int attempt) {
    AttemptChannel channel(*store_, membership_, coordinator(), attempt, reporter());
    try {
      channel.start_barrier(config_.join_timeout, check_interrupt_);
    } catch (const Interrupted& i) {
      publish(channel, interrupted(i.signal));
      say(cat("received ", signal_name(i.signal), " between attempts; no worker is running"));
      return {false, 128 + i.signal};
    } catch (const AttemptEndedEarly& early) {
      if (early.end.kind == AttemptEnd::Kind::Interrupted) {
        print_stop_report(early.end, {});
        return {false, 128 + early.end.signal};
      }
      print_summary(early.end, {}, attempt, false);
      return {false, 1};
    } catch (const Error& e) {
      say(cat("error: ", e.what()));
      publish(channel, agent_failed(e.what()));
      return {false, 1};
    }

    const auto parent = process_env();
    if (attempt == 0 && needs_omp_default(parent, config_.nproc)) {
      say("note: setting OMP_NUM_THREADS=1 for each worker (as torchrun does: more than one worker per node and "
          "OMP_NUM_THREADS is unset), to keep the machine from being overloaded; set it yourself to tune it");
    }
    WorkerGroup group(worker_specs(attempt), signals_, guard_);
    int signal_received = 0;
    AttemptEnd end;
    {
      std::vector<int> others;
      if (coordinator()) {
        for (int n = 0; n < membership_.nnodes; ++n) {
          if (n != membership_.node_rank) others.push_back(n);
        }
      }
      EndWatcher watcher(store_->clone(), {.end_key = channel.end_key(),
                                           .watched_nodes = others,
                                           .interval = config_.monitor_interval,
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
      group.bound_stopped(config_.stopped_timeout, membership_.world_size(), [&] {
        return membership_.nnodes == 1 || others_succeeded(channel);
      });
      WorkerGroup::Wakeup wakeup;
      for (;;) {
        wakeup = group.wait(watcher.fd());
        if (wakeup.event == WorkerGroup::Event::StoppedAlone) {
          say(stopped_alone_notice(group));
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
          end = publish(channel, stopped_too_long(group));
          group.stop(SIGTERM, config_.grace_period);
          break;
        }
        case WorkerGroup::Event::WorkerFailed: {
          AttemptEnd failed = reporter();
          failed.kind = AttemptEnd::Kind::WorkerFailed;
          const std::size_t index = *group.failed_worker();
          failed.worker = group.exits()[index];
          failed.blame = blame(group, index);
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
    if (end.kind == AttemptEnd::Kind::Succeeded && !signal_received) return {false, 0};
    if (end.kind == AttemptEnd::Kind::Succeeded || end.kind == AttemptEnd::Kind::Interrupted) {
      // A requested stop, here or on another node: not a failure.
      const AttemptEnd stop = end.kind == AttemptEnd::Kind::Interrupted ? end : interrupted(signal_received);
      print_stop_report(stop, group.exits());
      return {false, 128 + stop.signal};
    }

    const bool restart = end.restartable() && attempt < config_.max_restarts && !signal_received;
    if (end.kind != AttemptEnd::Kind::Succeeded) print_summary(end, group.exits(), attempt, restart);
    if (signal_received && end.restartable() && attempt < config_.max_restarts) {
      // The other nodes will restart: tell them, at the next attempt's barrier, that this one will not.
      AttemptChannel next(*store_, membership_, coordinator(), attempt + 1, reporter());
      publish(next, interrupted(signal_received));
    }
    if (restart) return {true, 0};
    return {false, signal_received ? 128 + signal_received : 1};
  }

  // The root cause when the failed worker (group index `index`) was a victim: the rank its
  // error says it waited for, checked against this node's stopped workers.
  std::optional<Blame> blame(WorkerGroup& group, std::size_t index) const {
    const WorkerExit& failed = group.exit_of(index);
    const auto culprit = find_root_cause(failed.rank, group.kept_lines(index), group.find_suspended());
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
    for (int n = 0; n < membership_.nnodes; ++n) {
      const auto& node = membership_.nodes[static_cast<std::size_t>(n)];
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
    write_fully(STDERR_FILENO, format_stop_report(in));
  }

  void print_summary(const AttemptEnd& end, const std::vector<WorkerExit>& local, int attempt, bool restarting) {
    SummaryInput in;
    in.root = end;
    in.local = local;
    in.node_rank = membership_.node_rank;
    in.host = host_;
    in.attempt = attempt;
    in.max_restarts = config_.max_restarts;
    in.restarting = restarting;
    write_fully(STDERR_FILENO, format_summary(in));
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
  Membership membership_;
  std::shared_ptr<TCPStore> store_;
};

}  // namespace

int run_agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard) {
  Agent agent(config, command, signals, guard);
  return agent.run();
}

}  // namespace ddp::launcher
