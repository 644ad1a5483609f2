// What one node's agent knows while it runs the job, and its steps: agent.cpp forms the job and
// goes from round to round (the loop that ties the rooms together), attempt.cpp runs one attempt
// of this node's workers and reports how it ended. Private to agent/.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "cli/command.h"
#include "cli/job_config.h"
#include "ddp/error.h"
#include "rendezvous/attempt_channel.h"
#include "rendezvous/attempt_end.h"
#include "rendezvous/elastic_rendezvous.h"
#include "rendezvous/heartbeat.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/round_record.h"
#include "rendezvous/store_host.h"
#include "reports/checkpoint_record.h"
#include "workers/orphan_guard.h"
#include "workers/signals.h"
#include "workers/worker_group.h"

namespace ddp::launcher {

class Agent {
 public:
  Agent(const JobConfig& config, const Command& command, SignalWatch& signals, OrphanGuard* guard);

  int run();

 private:
  // How an attempt ended for this node: the job's exit status, or another round.
  struct Outcome {
    bool next_round = false;
    int exit_code = 0;
    AttemptEnd end;
    bool uses_restart = false;
  };

  bool coordinator() const { return server_ != nullptr; }
  AttemptEnd reporter() const;

  // The job (agent.cpp).
  void start_store();
  void join();
  void connect_as_agent(std::shared_ptr<TCPStore> joining);
  void join_first_round(int first_round);
  void say_place() const;
  void say_waiting(const RoundRecord& full) const;
  void enter_round(const RoundRecord& record);
  std::optional<int> next_round(const Outcome& outcome);
  std::optional<int> round_not_formed(const RoundRecord& record);
  int finish_job(int exit_code);
  std::vector<int> agents_to_outlast(int exit_code);

  // One attempt (attempt.cpp).
  Outcome run_attempt(int attempt);
  std::optional<Outcome> start_barrier(AttemptChannel& channel);
  WorkerGroup::Wakeup wait_for_event(WorkerGroup& group, int watch_fd);
  AttemptEnd end_of(WorkerGroup& group, const WorkerGroup::Wakeup& wakeup, AttemptChannel& channel, EndWatcher& watcher,
                    int attempt, int& signal_received);
  AttemptEnd succeed(AttemptChannel& channel, EndWatcher& watcher, int& signal_received);
  AttemptEnd wait_for_end(AttemptChannel& channel, EndWatcher& watcher, int& signal_received);
  Outcome after_attempt(const AttemptEnd& end, const std::vector<WorkerExit>& local, int signal_received);
  AttemptEnd publish(AttemptChannel& channel, const AttemptEnd& end);
  AttemptEnd store_lost(const Error& e) const;
  AttemptEnd interrupted(int sig) const;
  AttemptEnd agent_failed(const std::string& why) const;
  bool others_succeeded(AttemptChannel& channel) const;
  NodeWatch watch_others() const;
  std::function<std::optional<AttemptEnd>(Store&)> watch_round() const;
  void print_stop_report(const AttemptEnd& stop, const std::vector<WorkerExit>& local);
  void print_summary(const AttemptEnd& end, const std::vector<WorkerExit>& local, bool restarting);

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

}  // namespace ddp::launcher
