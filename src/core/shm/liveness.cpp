#include "shm/liveness.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

namespace ddp::detail::shm {
namespace {

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// From /proc/<pid>/stat: gone, a zombie (Z) or dead (X) counts as exited.
bool exited_by_proc(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return errno == ENOENT;
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  if (!close_paren || close_paren[1] != ' ') return false;
  const char state = close_paren[2];
  return state == 'Z' || state == 'X';
}

}  // namespace

PeerWatch::PeerWatch(std::vector<pid_t> pids) : pids_(std::move(pids)), pidfds_(pids_.size(), -1) {
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] > 0) pidfds_[i] = open_pidfd(pids_[i]);
  }
}

PeerWatch::PeerWatch(PeerWatch&& other) noexcept { *this = std::move(other); }

PeerWatch& PeerWatch::operator=(PeerWatch&& other) noexcept {
  if (this != &other) {
    close_all();
    pids_ = std::move(other.pids_);
    pidfds_ = std::move(other.pidfds_);
    other.pids_.clear();
    other.pidfds_.clear();
  }
  return *this;
}

PeerWatch::~PeerWatch() { close_all(); }

void PeerWatch::close_all() {
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
  pidfds_.clear();
}

bool PeerWatch::exited(int i) const { return exits_within(i, std::chrono::milliseconds(0)); }

bool PeerWatch::exits_within(int i, std::chrono::milliseconds within) const {
  const auto k = static_cast<std::size_t>(i);
  if (k >= pids_.size() || pids_[k] <= 0) return false;
  if (pidfds_[k] >= 0) {
    pollfd p{pidfds_[k], POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(within.count())) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  const auto until = std::chrono::steady_clock::now() + within;
  while (!exited_by_proc(pids_[k])) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace ddp::detail::shm
