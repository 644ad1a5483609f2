// ddprun's own signals, read from a signalfd: SIGCHLD (a worker ended) and the termination
// signals (SIGINT, SIGTERM, SIGHUP) that ddprun passes on to every worker.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "net/socket.h"

namespace ddp::launcher {

class SignalWatch {
 public:
  // Blocks the signals in this thread (and so in every thread it starts later: call it first
  // thing in main) and ignores SIGPIPE. Workers get a clean mask and default dispositions.
  SignalWatch();

  // Readable when a signal is pending.
  int fd() const { return fd_.get(); }
  // Takes every pending signal, without blocking.
  std::vector<int> take();
  // Takes the pending signals and returns the first termination signal among them, if any
  // (SIGCHLD is dropped: callers that need it use take()).
  std::optional<int> take_termination();

  static bool is_termination(int signal);

 private:
  detail::Fd fd_;
};

// A stop that reaches everyone at once is one stop: `timeout` signals ddprun and then its whole
// process group, Slurm signals every process of the job step, a multi-node job's other nodes
// stop it through the store while the same signal reaches them too. So a termination signal
// that arrives within this long of the start of a stop is a copy of the request already being
// carried out; a later one (a user's second Ctrl-C) asks for SIGKILL at once.
inline constexpr std::chrono::milliseconds kSameStopWindow{1000};

// Whether a termination signal that arrives `since_stop_began` after ddprun started stopping its
// workers asks for more than that stop (SIGKILL now) rather than repeating it.
bool escalates_stop(std::chrono::steady_clock::duration since_stop_began);

// Thrown out of long waits (the rendezvous, barriers) when ddprun is asked to stop.
struct Interrupted {
  int signal;
};

}  // namespace ddp::launcher
