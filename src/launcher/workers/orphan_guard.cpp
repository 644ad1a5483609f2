#include "workers/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

namespace ddp::launcher {

namespace {

[[noreturn]] void run_guard(int pipe_read) {
  // Only ddprun's end of the pipe closing ends the guard; a terminal's Ctrl-C does not.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Hold no console open (whoever reads ddprun's output waits for every writer to close it).
  const int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(null_fd, fd);
  std::set<pid_t> groups;
  std::string buffer;
  char chunk[256];
  for (;;) {
    const ssize_t n = ::read(pipe_read, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(n));
    std::size_t eol;
    while ((eol = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, eol);
      buffer.erase(0, eol + 1);
      if (line.size() < 2) continue;
      const pid_t group = static_cast<pid_t>(std::atol(line.c_str() + 1));
      if (group <= 1) continue;
      if (line[0] == '+') groups.insert(group);
      if (line[0] == '-') groups.erase(group);
    }
  }
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  ::_exit(0);
}

}  // namespace

std::unique_ptr<OrphanGuard> OrphanGuard::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return nullptr;
  }
  if (pid == 0) {
    ::close(fds[1]);
    run_guard(fds[0]);
  }
  ::close(fds[0]);
  return std::unique_ptr<OrphanGuard>(new OrphanGuard(pid, detail::Fd(fds[1])));
}

OrphanGuard::~OrphanGuard() {
  pipe_.reset();  // the guard kills what is still listed and exits
  int status;
  ::waitpid(pid_, &status, 0);
}

void OrphanGuard::send(char op, pid_t group) {
  char line[32];
  const int n = std::snprintf(line, sizeof line, "%c%d\n", op, static_cast<int>(group));
  [[maybe_unused]] auto written = ::write(pipe_.get(), line, static_cast<std::size_t>(n));
}

void OrphanGuard::watch(pid_t group) { send('+', group); }
void OrphanGuard::forget(pid_t group) { send('-', group); }

}  // namespace ddp::launcher
