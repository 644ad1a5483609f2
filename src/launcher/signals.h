// ddprun's own signals, read from a signalfd: SIGCHLD (a worker ended) and the termination
// signals (SIGINT, SIGTERM, SIGHUP) that ddprun passes on to every worker.
#pragma once

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

// Thrown out of long waits (the rendezvous, barriers) when ddprun is asked to stop.
struct Interrupted {
  int signal;
};

}  // namespace ddp::launcher
