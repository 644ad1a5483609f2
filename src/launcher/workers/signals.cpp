#include "workers/signals.h"

#include <errno.h>
#include <signal.h>
#include <cstring>
#include <sys/signalfd.h>
#include <unistd.h>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::launcher {

SignalWatch::SignalWatch() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) ::sigaddset(&set, sig);
  if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw IOError("cannot block signals");
  ::signal(SIGPIPE, SIG_IGN);
  fd_.reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) throw IOError(detail::cat("cannot create a signalfd: ", std::strerror(errno)));
}

bool SignalWatch::is_termination(int signal) { return signal == SIGINT || signal == SIGTERM || signal == SIGHUP; }

bool escalates_stop(std::chrono::steady_clock::duration since_stop_began) {
  return since_stop_began >= kSameStopWindow;
}

std::vector<int> SignalWatch::take() {
  std::vector<int> signals;
  signalfd_siginfo info;
  for (;;) {
    const ssize_t n = ::read(fd_.get(), &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) {
      signals.push_back(static_cast<int>(info.ssi_signo));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return signals;
  }
}

std::optional<int> SignalWatch::take_termination() {
  for (int sig : take()) {
    if (is_termination(sig)) return sig;
  }
  return std::nullopt;
}

}  // namespace ddp::launcher
