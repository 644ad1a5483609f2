// The workers of one node for one attempt: starts them, relays their output, reaps them, and
// stops them (a signal to each worker's process group, then SIGKILL after a grace period).
// Single-threaded: everything happens in wait() and stop(), on the caller's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reports/blame.h"
#include "workers/console.h"
#include "workers/orphan_guard.h"
#include "workers/signals.h"
#include "workers/spawn.h"
#include "workers/stopped_alone.h"
#include "workers/worker_exit.h"
#include "workers/worker_output.h"

namespace ddp::launcher {

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string path;                        // the executable
  std::vector<std::string> argv;           // argv[0] included
  std::map<std::string, std::string> env;  // set on top of ddprun's environment
  WorkerOutputOptions output;
  int terminal_columns = 0;  // > 0: stdout is a pseudo-terminal this wide (output.live_stdout too)
};

class WorkerGroup {
 public:
  // `guard` (may be null) hears of every process group, so that it can kill them if ddprun dies.
  WorkerGroup(std::vector<WorkerSpec> specs, SignalWatch& signals, OrphanGuard* guard);
  // Kills whatever still runs (SIGKILL) and reaps it.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker. A worker that cannot be started counts as failed with exit code 127 and
  // the reason as its last line. Throws ddp::IOError when a log file cannot be created.
  void start();

  enum class Event {
    WorkerFailed,  // failed_worker(): the first worker that failed on its own
    AllSucceeded,  // every worker exited 0
    Signal,        // ddprun received a termination signal (signal())
    External,      // `external_fd` became readable
    // With bound_stopped() (see stopped_alone.h): the workers still running are all stopped
    // (stopped_alone() names them) and the rest of the job has exited; they run again; they have
    // stayed so for the bound.
    StoppedAlone,
    Resumed,
    StoppedTooLong,
  };
  struct Wakeup {
    Event event;
    int signal = 0;
  };
  // Relays output and reaps workers until one of the events. `external_fd` may be -1.
  Wakeup wait(int external_fd);

  // Sends `signal` to every worker process group that still has a process, relays output while
  // they end, and SIGKILLs what is left after `grace` (at once on a SIGINT/SIGTERM/SIGHUP that
  // arrives later than kSameStopWindow after the stop began; one within it is the same stop).
  // Returns when every worker has ended and its output is drained. Safe to call twice.
  void stop(int signal, std::chrono::milliseconds grace);

  // Index (into specs) of the first worker that failed on its own, if any.
  std::optional<std::size_t> failed_worker() const { return first_failure_; }
  // How each worker ended (complete after stop(), or after wait() returned AllSucceeded).
  std::vector<WorkerExit> exits() const;
  const WorkerExit& exit_of(std::size_t index) const { return workers_[index].exit; }
  std::vector<pid_t> pids() const;
  // The workers that are stopped now (SIGSTOP, Ctrl-Z, a debugger), each also marked in its
  // WorkerExit (`suspended`). Call before stop(), which continues them.
  std::vector<SuspendedWorker> find_suspended();
  // The lines of worker `index` that its output options' `keep` kept.
  std::vector<std::string> kept_lines(std::size_t index) const;
  // Makes wait() watch for workers stopped alone: `world_size` is the job's; `other_nodes_exited`
  // (asked only when this node's running workers are all stopped) says whether every other
  // node's workers have exited.
  void bound_stopped(std::chrono::milliseconds bound, int world_size, std::function<bool()> other_nodes_exited);
  // The workers found stopped alone (after StoppedAlone or StoppedTooLong).
  const std::vector<SuspendedWorker>& stopped_alone() const { return stopped_alone_; }

  // The first SIGINT/SIGTERM/SIGHUP ddprun received while this group ran, if any.
  std::optional<int> received_signal() const { return received_signal_; }

 private:
  struct Worker {
    WorkerSpec spec;
    std::unique_ptr<WorkerOutput> output;
    pid_t pid = -1;
    detail::Fd fd[2];  // stdout, stderr read ends
    bool running = false;
    bool group_alive = false;  // its process group may still hold processes
    WorkerExit exit;
  };

  // One round: waits up to `timeout` for output, signals or `external_fd`, then handles them.
  // Returns true when `external_fd` is readable.
  bool pump(std::chrono::milliseconds timeout, int external_fd);
  std::optional<Event> look_for_stopped_alone();
  void read_output(Worker& w, int stream);
  void reap();
  void on_exit(Worker& w, int status);
  void drain(Worker& w, std::chrono::milliseconds limit);
  void signal_groups(int signal);
  bool any_running() const;
  bool any_group_alive();
  void close_output(Worker& w);

  Console console_;  // before workers_: their outputs use it
  std::vector<Worker> workers_;
  SignalWatch& signals_;
  OrphanGuard* guard_;
  std::optional<std::size_t> first_failure_;
  std::optional<int> pending_signal_;   // a termination signal not yet returned by wait()
  std::optional<int> received_signal_;  // the first termination signal ddprun received
  bool failure_reported_ = false;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_began_;
  bool escalate_ = false;  // a new request to stop arrived while stopping: SIGKILL now
  struct StoppedBound {
    StoppedAloneClock clock;
    int world_size;
    std::function<bool()> other_nodes_exited;
    std::chrono::steady_clock::time_point last_look;
  };
  std::optional<StoppedBound> stopped_bound_;
  std::vector<SuspendedWorker> stopped_alone_;
};

}  // namespace ddp::launcher
