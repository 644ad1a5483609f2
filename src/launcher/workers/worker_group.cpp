#include "workers/worker_group.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::launcher {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::chrono::milliseconds until(Clock::time_point deadline) {
  return std::max(0ms, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

WorkerGroup::WorkerGroup(std::vector<WorkerSpec> specs, SignalWatch& signals, OrphanGuard* guard)
    : signals_(signals), guard_(guard) {
  const std::string host = detail::local_hostname();
  for (auto& spec : specs) {
    Worker w;
    w.exit.rank = spec.rank;
    w.exit.local_rank = spec.local_rank;
    w.exit.node_rank = spec.node_rank;
    w.exit.host = host;
    w.exit.log_file = spec.output.log_path;
    w.spec = std::move(spec);
    workers_.push_back(std::move(w));
  }
}

WorkerGroup::~WorkerGroup() {
  signal_groups(SIGKILL);
  for (auto& w : workers_) {
    if (w.running) {
      int status;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      w.running = false;
    }
    if (w.group_alive && guard_) guard_->forget(w.pid);
  }
}

void WorkerGroup::start() {
  for (auto& w : workers_) {
    WorkerOutputOptions options = w.spec.output;
    options.screen = &console_;
    w.output = std::make_unique<WorkerOutput>(std::move(options));
  }
  for (auto& w : workers_) {
    try {
      SpawnedWorker spawned =
          spawn_worker(w.spec.path, w.spec.argv, merged_environment(w.spec.env), w.spec.terminal_columns);
      w.pid = spawned.pid;
      w.fd[0] = std::move(spawned.out);
      w.fd[1] = std::move(spawned.err);
      w.running = true;
      w.group_alive = true;
      w.exit.pid = spawned.pid;
      if (guard_) guard_->watch(spawned.pid);
    } catch (const Error& e) {
      w.exit.exit_code = 127;
      w.exit.time = std::chrono::system_clock::now();
      w.output->on_data(Stream::Err, detail::cat("ddprun: ", e.what(), "\n"));
      if (!first_failure_) first_failure_ = static_cast<std::size_t>(&w - workers_.data());
    }
  }
}

WorkerGroup::Wakeup WorkerGroup::wait(int external_fd) {
  for (;;) {
    if (pending_signal_) {
      const int sig = *pending_signal_;
      pending_signal_.reset();
      return {Event::Signal, sig};
    }
    if (first_failure_ && !failure_reported_) {
      failure_reported_ = true;
      drain(workers_[*first_failure_], 300ms);  // its last words are still in the pipe
      return {Event::WorkerFailed};
    }
    if (!any_running()) {
      const bool all_ok =
          std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.exit.failed(); });
      if (!all_ok) return {Event::WorkerFailed};  // already reported: nothing runs any more
      for (auto& w : workers_) drain(w, 100ms);
      return {Event::AllSucceeded};
    }
    if (auto event = look_for_stopped_alone()) return {*event};
    if (pump(500ms, external_fd)) return {Event::External};
  }
}

void WorkerGroup::bound_stopped(std::chrono::milliseconds bound, int world_size,
                                std::function<bool()> other_nodes_exited) {
  stopped_bound_.emplace(StoppedBound{StoppedAloneClock(bound), world_size, std::move(other_nodes_exited), {}});
}

std::optional<WorkerGroup::Event> WorkerGroup::look_for_stopped_alone() {
  if (!stopped_bound_) return std::nullopt;
  StoppedBound& b = *stopped_bound_;
  const auto now = Clock::now();
  if (now - b.last_look < 200ms) return std::nullopt;  // /proc, at most 5 times a second
  b.last_look = now;
  int running = 0;
  std::vector<SuspendedWorker> stopped;
  for (auto& w : workers_) {
    if (!w.running) continue;
    ++running;
    if (process_state(w.pid) == 'T') stopped.push_back({w.exit.rank, stopped_state(w.pid).value_or("suspended")});
  }
  const int count = static_cast<int>(stopped.size());
  // The other nodes are asked only when this node's part holds (it may cost a store request).
  const bool alone = launcher::stopped_alone(running, count, true, b.world_size) &&
                     launcher::stopped_alone(running, count, b.other_nodes_exited(), b.world_size);
  switch (b.clock.observe(alone, now)) {
    case StoppedAloneClock::Change::None: return std::nullopt;
    case StoppedAloneClock::Change::Began: stopped_alone_ = std::move(stopped); return Event::StoppedAlone;
    case StoppedAloneClock::Change::Ended:
      if (running == 0) return std::nullopt;  // it ended: wait() says how
      return Event::Resumed;
    case StoppedAloneClock::Change::Expired:
      stopped_alone_ = std::move(stopped);
      for (const auto& s : stopped_alone_) {
        for (auto& w : workers_) {
          if (w.exit.rank == s.rank) w.exit.suspended = s.state;
        }
      }
      return Event::StoppedTooLong;
  }
  return std::nullopt;
}

void WorkerGroup::stop(int signal, std::chrono::milliseconds grace) {
  if (!stopping_) stop_began_ = Clock::now();
  stopping_ = true;
  signal_groups(signal);
  // A stopped worker (SIGSTOP, a debugger's stop, Ctrl-Z) would hold its SIGTERM until the grace
  // period ran out: continue it so that it can act on the signal (as systemd does).
  if (signal != SIGKILL) signal_groups(SIGCONT);
  const auto deadline = Clock::now() + grace;
  while ((any_running() || any_group_alive()) && Clock::now() < deadline && !escalate_) {
    pump(std::min<std::chrono::milliseconds>(100ms, until(deadline)), -1);
  }
  if (any_running() || any_group_alive()) {
    signal_groups(SIGKILL);
    const auto kill_deadline = Clock::now() + 5s;
    while ((any_running() || any_group_alive()) && Clock::now() < kill_deadline) pump(50ms, -1);
  }
  // Every writer is gone (or unkillable): take what is left in the pipes.
  const auto drain_deadline = Clock::now() + 2s;
  for (auto& w : workers_) drain(w, until(drain_deadline));
  for (auto& w : workers_) close_output(w);
}

std::vector<WorkerExit> WorkerGroup::exits() const {
  std::vector<WorkerExit> exits;
  for (const auto& w : workers_) {
    WorkerExit e = w.exit;
    if (w.output) e.last_lines = w.output->tail();
    exits.push_back(std::move(e));
  }
  return exits;
}

std::vector<pid_t> WorkerGroup::pids() const {
  std::vector<pid_t> pids;
  for (const auto& w : workers_) pids.push_back(w.pid);
  return pids;
}

std::vector<SuspendedWorker> WorkerGroup::find_suspended() {
  std::vector<SuspendedWorker> found;
  for (auto& w : workers_) {
    if (!w.running) continue;
    if (auto state = stopped_state(w.pid)) {
      w.exit.suspended = *state;
      found.push_back({w.exit.rank, *state});
    }
  }
  return found;
}

std::vector<std::string> WorkerGroup::kept_lines(std::size_t index) const {
  const auto& output = workers_[index].output;
  return output ? output->kept() : std::vector<std::string>{};
}

bool WorkerGroup::pump(std::chrono::milliseconds timeout, int external_fd) {
  std::vector<pollfd> fds;
  fds.push_back({signals_.fd(), POLLIN, 0});
  if (external_fd >= 0) fds.push_back({external_fd, POLLIN, 0});
  std::vector<std::pair<Worker*, int>> owners;
  for (auto& w : workers_) {
    for (int s = 0; s < 2; ++s) {
      if (w.fd[s]) {
        fds.push_back({w.fd[s].get(), POLLIN, 0});
        owners.emplace_back(&w, s);
      }
    }
  }
  const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  bool external = false;
  if (ready > 0) {
    const std::size_t first_pipe = external_fd >= 0 ? 2 : 1;
    for (std::size_t i = first_pipe; i < fds.size(); ++i) {
      if (fds[i].revents) read_output(*owners[i - first_pipe].first, owners[i - first_pipe].second);
    }
    external = external_fd >= 0 && (fds[1].revents & POLLIN);
  }
  for (int sig : signals_.take()) {
    if (!SignalWatch::is_termination(sig)) continue;
    if (!received_signal_) received_signal_ = sig;
    if (stopping_) {
      // A copy of the request being carried out is no reason to cut the grace period short.
      if (escalates_stop(Clock::now() - stop_began_)) escalate_ = true;
    } else if (!pending_signal_) {
      pending_signal_ = sig;
    }
  }
  reap();
  return external;
}

void WorkerGroup::read_output(Worker& w, int stream) {
  char buffer[64 * 1024];
  for (int round = 0; round < 16 && w.fd[stream]; ++round) {
    const ssize_t n = ::read(w.fd[stream].get(), buffer, sizeof buffer);
    if (n > 0) {
      w.output->on_data(static_cast<Stream>(stream), std::string_view(buffer, static_cast<std::size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    w.output->on_eof(static_cast<Stream>(stream));  // EOF, or an error that ends the stream
    w.fd[stream].reset();
  }
}

void WorkerGroup::reap() {
  std::vector<std::size_t> failed_now;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;
    // Not a worker: one of a worker's own children, orphaned to ddprun (a subreaper), or the guard.
    auto it =
        std::find_if(workers_.begin(), workers_.end(), [&](const Worker& w) { return w.running && w.pid == pid; });
    if (it == workers_.end()) continue;
    on_exit(*it, status);
    if (it->exit.failed() && !it->exit.stopped) failed_now.push_back(static_cast<std::size_t>(it - workers_.begin()));
  }
  if (first_failure_ || failed_now.empty()) return;
  // Several failures seen at once: a crash (a signal) is the likelier cause than an exit code
  // (peers usually exit with an error because a rank died).
  auto crash =
      std::find_if(failed_now.begin(), failed_now.end(), [&](std::size_t i) { return workers_[i].exit.signal != 0; });
  first_failure_ = crash != failed_now.end() ? *crash : failed_now.front();
}

void WorkerGroup::on_exit(Worker& w, int status) {
  w.running = false;
  w.exit.time = std::chrono::system_clock::now();
  w.exit.stopped = stopping_;
  if (WIFEXITED(status)) {
    w.exit.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    w.exit.signal = WTERMSIG(status);
  }
}

void WorkerGroup::drain(Worker& w, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (w.fd[0] || w.fd[1]) {
    std::vector<pollfd> fds;
    std::vector<int> streams;
    for (int s = 0; s < 2; ++s) {
      if (w.fd[s]) {
        fds.push_back({w.fd[s].get(), POLLIN, 0});
        streams.push_back(s);
      }
    }
    const auto left = until(deadline);
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) return;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents) read_output(w, streams[i]);
    }
    if (left == 0ms) return;
  }
}

void WorkerGroup::close_output(Worker& w) {
  for (int s = 0; s < 2; ++s) {
    if (w.fd[s]) {
      w.output->on_eof(static_cast<Stream>(s));
      w.fd[s].reset();
    }
  }
}

void WorkerGroup::signal_groups(int signal) {
  for (auto& w : workers_) {
    if (!w.group_alive) continue;
    if (::kill(-w.pid, signal) != 0 && errno == ESRCH) {
      w.group_alive = false;
      if (guard_) guard_->forget(w.pid);
    }
  }
}

bool WorkerGroup::any_running() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
}

bool WorkerGroup::any_group_alive() {
  bool any = false;
  for (auto& w : workers_) {
    if (!w.group_alive) continue;
    if (::kill(-w.pid, 0) != 0 && errno == ESRCH) {
      w.group_alive = false;
      if (guard_) guard_->forget(w.pid);
    } else {
      any = true;
    }
  }
  return any;
}

}  // namespace ddp::launcher
