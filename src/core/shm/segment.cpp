#include "shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail::shm {

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Segment::~Segment() { release(); }

void Segment::release() {
  if (data_) ::munmap(data_, size_);
  close_fd();
  data_ = nullptr;
  size_ = 0;
}

void Segment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Segment Segment::map(int fd, std::size_t bytes, const std::string& what) {
  // MAP_POPULATE: fault the pages in now rather than in the first collectives.
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (data == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    throw IOError(cat("cannot map ", what, " (", bytes, " bytes): ", std::strerror(err)));
  }
  Segment s;
  s.data_ = data;
  s.size_ = bytes;
  s.fd_ = fd;
  return s;
}

Segment Segment::create(std::size_t bytes) {
  const int fd = ::memfd_create("ddp-shm", MFD_CLOEXEC);
  if (fd < 0) throw IOError(cat("memfd_create failed: ", std::strerror(errno)));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    throw IOError(cat("cannot size a shared-memory segment to ", bytes, " bytes: ", std::strerror(err)));
  }
  return map(fd, bytes, "a new shared-memory segment");
}

Segment Segment::open(pid_t owner, int fd, std::size_t bytes) {
  const std::string path = cat("/proc/", owner, "/fd/", fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) throw IOError(cat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(mine, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    ::close(mine);
    throw IOError(cat(path, " is not the expected segment of ", bytes, " bytes"));
  }
  Segment s = map(mine, bytes, path);
  s.close_fd();  // the mapping keeps the memory; the descriptor is not needed
  return s;
}

}  // namespace ddp::detail::shm
