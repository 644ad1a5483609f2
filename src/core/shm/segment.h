// A shared-memory segment: an anonymous memory file (memfd) mapped into each rank of a host.
// It never has a name in /dev/shm, so nothing outlives the job, whatever kills it: the memory
// goes away with the last mapping. Peers map it through /proc/<creator pid>/fd/<fd>, which
// needs the same user (and a /proc that shows the creator); when they cannot, the group falls
// back to gloo.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace ddp::detail::shm {

class Segment {
 public:
  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Creates a zeroed segment of `bytes` and maps it. Throws IOError saying what failed.
  static Segment create(std::size_t bytes);
  // Maps the segment `fd` of process `owner` (its creator, still holding `fd` open). Throws
  // IOError naming the path when it cannot be opened, is not `bytes` long, or cannot be mapped.
  static Segment open(pid_t owner, int fd, std::size_t bytes);

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  // The descriptor the creator keeps open until every peer has mapped the segment (-1 after
  // close_fd, and always -1 on peers).
  int fd() const { return fd_; }
  void close_fd();

 private:
  void release();
  static Segment map(int fd, std::size_t bytes, const std::string& what);
  void* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace ddp::detail::shm
