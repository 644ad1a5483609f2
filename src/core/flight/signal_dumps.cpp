#include "flight/signal_dumps.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace ddp::detail {
namespace {

// Signals. A handler only writes the signal's number to a pipe (about all a handler may do); a
// thread waiting on the pipe writes the dump. SIGUSR1 asks for a dump. SIGTERM (what ddprun,
// torchrun, Slurm and Kubernetes send to stop a worker, as when another worker failed) gets the
// dump first: its handler waits for the thread's answer, for a second at most (the thread may
// need a lock the interrupted thread holds), then ends the process as SIGTERM would have.
int g_signals[2] = {-1, -1};  // handler -> dump thread: the signal's number
int g_written[2] = {-1, -1};  // dump thread -> SIGTERM's handler: done

void on_signal(int sig) {
  const int saved = errno;
  const char byte = static_cast<char>(sig);
  [[maybe_unused]] auto n = ::write(g_signals[1], &byte, 1);
  if (sig == SIGTERM) {
    pollfd answer{g_written[0], POLLIN, 0};
    ::poll(&answer, 1, 1000);
    ::raise(SIGTERM);  // SA_RESETHAND made it the default again: it ends the process once this returns
  }
  errno = saved;
}

bool is_default(int sig) {
  struct sigaction old {};
  return ::sigaction(sig, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
}

}  // namespace

void dump_on_signals(std::function<void(const std::string& reason)> dump) {
  const bool usr1 = is_default(SIGUSR1), term = is_default(SIGTERM);
  if (!usr1 && !term) return;
  if (::pipe2(g_signals, O_CLOEXEC) != 0 || ::pipe2(g_written, O_CLOEXEC) != 0) return;
  // A burst of signals fills the pipe at worst: a handler must never block on it.
  ::fcntl(g_signals[1], F_SETFL, ::fcntl(g_signals[1], F_GETFL) | O_NONBLOCK);
  // The thread starts with the two signals blocked (never its to handle: SIGTERM's handler would
  // wait there for itself).
  sigset_t both, before;
  sigemptyset(&both);
  sigaddset(&both, SIGUSR1);
  sigaddset(&both, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &both, &before);
  std::thread([dump = std::move(dump)] {
    for (;;) {
      char sig;
      const ssize_t n = ::read(g_signals[0], &sig, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      if (sig == SIGTERM) {
        dump(
            "SIGTERM: the process was told to stop (by ddprun when another worker failed, by a scheduler, "
            "or by kill)");
        const char done = 1;
        [[maybe_unused]] auto w = ::write(g_written[1], &done, 1);
      } else {
        dump("SIGUSR1: a dump was asked for (kill -USR1)");
      }
    }
  }).detach();
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (usr1) ::sigaction(SIGUSR1, &action, nullptr);
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  if (term) ::sigaction(SIGTERM, &action, nullptr);
}

}  // namespace ddp::detail
