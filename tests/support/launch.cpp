#include "support/launch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ddp::test {

using Clock = std::chrono::steady_clock;

Launch::Launch(std::vector<std::string> argv, std::map<std::string, std::string> env, LaunchOptions options)
    : argv_(std::move(argv)) {
  int out[2], err[2];
  if (options.stdout_terminal) {
    winsize size{};
    size.ws_row = 24;
    size.ws_col = 100;
    if (::openpty(&out[0], &out[1], nullptr, nullptr, &size) != 0) throw std::runtime_error("openpty failed");
    ::fcntl(out[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(out[1], F_SETFD, FD_CLOEXEC);
    termios mode{};
    ::tcgetattr(out[1], &mode);
    mode.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    ::tcsetattr(out[1], TCSANOW, &mode);
  } else if (::pipe2(out, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  if (::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const ExecImage image(argv_, env);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    image.exec();
  }
  ::setpgid(pid_, pid_);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(err_fd_, F_SETFL, O_NONBLOCK);
}

Launch::~Launch() {
  if (!done_) kill_group();
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Launch::kill_group() {
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  if (!done_) {
    int status = 0;
    if (::waitpid(pid_, &status, 0) == pid_) {
      done_ = true;
      if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) signal_ = WTERMSIG(status);
    }
  }
}

void Launch::signal(int sig) const { ::kill(pid_, sig); }

void Launch::pump(int timeout_ms) {
  pollfd fds[2];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (n > 0) ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
  else ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
  for (int* fd : {&out_fd_, &err_fd_}) {
    if (*fd < 0) continue;
    std::string& sink = fd == &out_fd_ ? out_ : err_;
    char buffer[65536];
    for (;;) {
      const ssize_t got = ::read(*fd, buffer, sizeof buffer);
      if (got > 0) {
        sink.append(buffer, static_cast<std::size_t>(got));
        continue;
      }
      // The end: EOF of a pipe, or EIO of a terminal once every writer closed it.
      if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(*fd);
        *fd = -1;
      }
      break;
    }
  }
  if (!done_) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      done_ = true;
      if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) signal_ = WTERMSIG(status);
    }
  }
}

bool Launch::wait(std::chrono::milliseconds deadline) { return wait_all({this}, deadline); }

bool Launch::wait_for(const std::string& text, std::chrono::milliseconds deadline) {
  const auto end = Clock::now() + deadline;
  while (Clock::now() < end) {
    if (out_.find(text) != std::string::npos || err_.find(text) != std::string::npos) return true;
    if (done_ && out_fd_ < 0 && err_fd_ < 0) return false;
    pump(20);
  }
  return false;
}

bool Launch::wait_all(const std::vector<Launch*>& launches, std::chrono::milliseconds deadline) {
  const auto end = Clock::now() + deadline;
  for (;;) {
    bool all = true;
    for (Launch* l : launches) all = all && l->done_ && l->out_fd_ < 0 && l->err_fd_ < 0;
    if (all) return true;
    if (Clock::now() >= end) break;
    for (Launch* l : launches) l->pump(launches.size() == 1 ? 50 : 10);
  }
  for (Launch* l : launches) {
    if (l->done_ && l->out_fd_ < 0 && l->err_fd_ < 0) continue;
    l->kill_group();
    l->pump(0);
    ADD_FAILURE() << l->argv_[0] << " did not finish within " << deadline.count() << " ms; killed it. Output:\n"
                  << l->all();
  }
  return false;
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = content.rfind(')');
  if (paren == std::string::npos || paren + 2 >= content.size()) return false;
  const char state = content[paren + 2];
  return state != 'Z' && state != 'X';
}

TempDir::TempDir() {
  char path[] = "/tmp/ddprun-test-XXXXXX";
  if (!::mkdtemp(path)) throw std::runtime_error("mkdtemp failed");
  path_ = path;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text, bool executable) {
  std::ofstream(path) << text;
  if (executable)
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) lines.push_back(line);
  }
  return lines;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) ++n;
  return n;
}

}  // namespace ddp::test
