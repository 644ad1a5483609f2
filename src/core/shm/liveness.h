// Whether the other ranks on this host are still alive, asked while waiting for them. Holds a
// pidfd per peer (opened while the peer is known to be alive, so a recycled pid cannot fool it);
// where pidfds are missing (kernels before 5.3) it reads /proc/<pid>/stat instead. A process that
// has exited but not yet been reaped (a zombie) counts as dead either way.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <vector>

namespace ddp::detail::shm {

class PeerWatch {
 public:
  PeerWatch() = default;
  // pids[i] is peer i's process; -1 (this rank itself) is never watched.
  explicit PeerWatch(std::vector<pid_t> pids);
  PeerWatch(PeerWatch&& other) noexcept;
  PeerWatch& operator=(PeerWatch&& other) noexcept;
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;
  ~PeerWatch();

  // Whether peer i has exited. Cheap (one poll or one small read); never throws.
  bool exited(int i) const;
  // Whether peer i exits within `within` (at once if it has). A dying process loses its open
  // files a moment before its exit shows: a peer's buffer that vanished asks this, not exited().
  bool exits_within(int i, std::chrono::milliseconds within) const;
  pid_t pid(int i) const { return pids_[static_cast<std::size_t>(i)]; }

 private:
  void close_all();
  std::vector<pid_t> pids_;
  std::vector<int> pidfds_;  // -1 where none
};

}  // namespace ddp::detail::shm
