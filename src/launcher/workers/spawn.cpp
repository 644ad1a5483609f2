#include "workers/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <cstring>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "ddp/error.h"
#include "util/strings.h"

extern char** environ;

namespace ddp::launcher {

using detail::cat;
using detail::Fd;

std::vector<std::string> merged_environment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> envp;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string item = *entry;
    const std::string name = item.substr(0, item.find('='));
    if (!overrides.count(name)) envp.push_back(item);
  }
  for (const auto& [name, value] : overrides) envp.push_back(name + "=" + value);
  return envp;
}

namespace {

void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw IOError(cat("cannot create a pipe for a worker's output: ", std::strerror(errno),
                      ". Too many open files? Raise `ulimit -n`."));
  }
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
}

// The child, between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(pid_t parent, int out, int err, int null_in, int report, const char* path,
                             char* const* argv, char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // ddprun died before the line above
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT}) ::signal(sig, SIG_DFL);
  ::dup2(null_in, STDIN_FILENO);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  ::execve(path, argv, envp);
  const int error = errno;
  [[maybe_unused]] auto n = ::write(report, &error, sizeof error);
  ::_exit(127);
}

// A pseudo-terminal for a worker's stdout: `read_end` is its master side. Output is passed on as
// written (no "\n" -> "\r\n"), and the terminal is as wide as ddprun's, less the line prefix.
void make_terminal(Fd& read_end, Fd& write_end, int columns) {
  int master = -1, slave = -1;
  winsize size{};
  size.ws_row = 24;
  size.ws_col = static_cast<unsigned short>(std::max(20, columns));
  if (::openpty(&master, &slave, nullptr, nullptr, &size) != 0) {
    throw IOError(cat("cannot create a pseudo-terminal for a worker's output: ", std::strerror(errno),
                      ". Too many open files or ptys? Run ddprun with its output to a file or pipe to do without."));
  }
  read_end.reset(master);
  write_end.reset(slave);
  ::fcntl(master, F_SETFD, FD_CLOEXEC);
  ::fcntl(slave, F_SETFD, FD_CLOEXEC);
  termios mode{};
  if (::tcgetattr(slave, &mode) == 0) {
    mode.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    mode.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(slave, TCSANOW, &mode);
  }
}

}  // namespace

SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& envp, int terminal_columns) {
  // Everything the child needs is prepared before fork: it must not allocate.
  std::vector<char*> argv_ptrs;
  for (const auto& a : argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<char*> envp_ptrs;
  for (const auto& e : envp) envp_ptrs.push_back(const_cast<char*>(e.c_str()));
  envp_ptrs.push_back(nullptr);

  SpawnedWorker worker;
  Fd out_write, err_write, report_read, report_write;
  if (terminal_columns > 0) {
    make_terminal(worker.out, out_write, terminal_columns);
  } else {
    make_pipe(worker.out, out_write);
  }
  make_pipe(worker.err, err_write);
  make_pipe(report_read, report_write);
  Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_in) throw IOError(cat("cannot open /dev/null: ", std::strerror(errno)));

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw IOError(cat("cannot start a worker (fork failed: ", std::strerror(errno),
                      "). The machine may be out of processes or memory."));
  }
  if (pid == 0) {
    exec_child(parent, out_write.get(), err_write.get(), null_in.get(), report_write.get(), path.c_str(),
               argv_ptrs.data(), envp_ptrs.data());
  }
  ::setpgid(pid, pid);  // also here, so that the group exists before anyone signals it
  worker.pid = pid;
  out_write.reset();
  err_write.reset();
  report_write.reset();
  // The report pipe closes on a successful exec (O_CLOEXEC) or carries exec's errno.
  int error = 0;
  ssize_t n;
  do {
    n = ::read(report_read.get(), &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof error) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    throw IOError(cat("cannot execute ", path, ": ", std::strerror(error),
                      error == ENOEXEC ? " (not a program this machine can run; a script needs a #! line)" : "",
                      ". Check the program path and that it is executable (chmod +x)."));
  }
  detail::set_nonblocking(worker.out.get());
  detail::set_nonblocking(worker.err.get());
  return worker;
}

}  // namespace ddp::launcher
