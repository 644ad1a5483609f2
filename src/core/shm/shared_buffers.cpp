#include "shm/shared_buffers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail::shm {
namespace {

constexpr int kOffsetBits = 48;
constexpr std::uint64_t kOffsetMask = (std::uint64_t{1} << kOffsetBits) - 1;

std::uint64_t encode_where(std::size_t index, std::size_t offset) {
  return (static_cast<std::uint64_t>(index + 1) << kOffsetBits) | offset;
}

// Whether every peer runs as this process's user, so that it may open /proc/<this pid>/fd (the
// segment's setup only proved it for the host's first rank).
bool peers_are_this_user(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    struct stat st {};
    if (pid >= 0 && (::stat(cat("/proc/", pid).c_str(), &st) != 0 || st.st_uid != ::geteuid())) return false;
  }
  return true;
}

}  // namespace

SharedBuffers::SharedBuffers(void* base, const Layout& layout, int me, std::vector<pid_t> pids)
    : layout_(layout),
      me_(me),
      same_user_(peers_are_this_user(pids)),
      pids_(std::move(pids)),
      base_(base),
      own_(kRegions),
      mapped_(static_cast<std::size_t>(layout.ranks), std::vector<Mapped>(kRegions)),
      seen_(static_cast<std::size_t>(layout.ranks)) {}

SharedBuffers::~SharedBuffers() { unmap_peers(); }

std::shared_ptr<void> SharedBuffers::allocate(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument("allocate_shared_memory: the size is 0");
  // A peer opens the memory through /proc/<this pid>/fd, which the kernel refuses to other users
  // and, for a process that is not dumpable (PR_SET_DUMPABLE 0, a changed identity), to all.
  if (!same_user_ || ::prctl(PR_GET_DUMPABLE) != 1) return nullptr;
  const std::size_t mapped = round_up(bytes, kPage);
  // The system calls (which fault every page in) run outside the lock, which ops take to locate.
  const int fd = ::memfd_create("ddp-shared", MFD_CLOEXEC);
  if (fd < 0) throw IOError(cat("allocate_shared_memory: memfd_create failed: ", std::strerror(errno)));
  void* data = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(mapped)) == 0) {
    data = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  }
  if (data == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    throw IOError(cat("allocate_shared_memory: cannot get ", mapped, " bytes of shared memory: ", std::strerror(err),
                      "; free memory, or allocate ordinary memory (collectives then copy through the segment)"));
  }
  std::size_t index = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (index < kRegions && own_[index].data) ++index;
    if (!base_ || index == kRegions) {
      ::munmap(data, mapped);
      ::close(fd);
      return nullptr;
    }
    own_[index] = {static_cast<char*>(data), mapped, fd};
    Region* r = layout_.region(base_, me_, index);
    r->fd.store(fd, std::memory_order_relaxed);
    r->bytes.store(mapped, std::memory_order_relaxed);
    if (++generation_ == 0) ++generation_;  // 0 marks a free entry
    r->generation.store(generation_, std::memory_order_release);
    changed_row();
  }
  // Outside the lock: should the control block's allocation throw, the deleter (release) runs.
  return {data, [self = shared_from_this(), index](void*) { self->release(index); }};
}

void SharedBuffers::release(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  Own& own = own_[index];
  if (base_) {
    layout_.region(base_, me_, index)->generation.store(0, std::memory_order_release);
    changed_row();
  }
  ::munmap(own.data, own.bytes);
  ::close(own.fd);
  own = {};
}

void SharedBuffers::changed_row() { layout_.control(base_, me_)->regions.fetch_add(1, std::memory_order_release); }

void SharedBuffers::drop_stale(int rank) {
  const std::uint32_t version = layout_.control(base_, rank)->regions.load(std::memory_order_acquire);
  if (version == seen_[static_cast<std::size_t>(rank)]) return;
  seen_[static_cast<std::size_t>(rank)] = version;
  auto& row = mapped_[static_cast<std::size_t>(rank)];
  for (std::size_t i = 0; i < kRegions; ++i) {
    Mapped& m = row[i];
    if (m.data && layout_.region(base_, rank, i)->generation.load(std::memory_order_acquire) != m.generation) {
      ::munmap(m.data, m.bytes);
      m = {};
    }
  }
}

std::uint64_t SharedBuffers::locate(const void* data, std::size_t bytes) const {
  const char* p = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!base_) return 0;
  for (std::size_t i = 0; i < kRegions; ++i) {
    const Own& own = own_[i];
    if (own.data && p >= own.data && bytes <= own.bytes &&
        p - own.data <= static_cast<std::ptrdiff_t>(own.bytes - bytes)) {
      return encode_where(i, static_cast<std::size_t>(p - own.data));
    }
  }
  return 0;
}

char* SharedBuffers::peer(int rank, std::uint64_t where, std::size_t bytes) {
  const std::size_t index = static_cast<std::size_t>(where >> kOffsetBits) - 1, offset = where & kOffsetMask;
  if (index >= kRegions || !base_) {
    throw Error(cat("its step names entry ", index,
                    " of its shared regions, which has none; do all ranks run the "
                    "same version of ddp?"));
  }
  drop_stale(rank);
  const Region* r = layout_.region(base_, rank, index);
  const std::uint32_t generation = r->generation.load(std::memory_order_acquire);
  const std::size_t length = r->bytes.load(std::memory_order_relaxed);
  if (generation == 0 || offset > length || bytes > length - offset) {
    throw Error(cat("its buffer (", bytes, " bytes at offset ", offset, " of its region ", index,
                    ") is not inside a live region of it (", generation == 0 ? 0 : length,
                    " bytes); was its memory freed during the op?"));
  }
  Mapped& m = mapped_[static_cast<std::size_t>(rank)][index];
  if (m.generation != generation) {
    if (m.data) ::munmap(m.data, m.bytes);
    m = {};
    const std::string path =
        cat("/proc/", pids_[static_cast<std::size_t>(rank)], "/fd/", r->fd.load(std::memory_order_relaxed));
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw IOError(cat("cannot open its buffer ", path, ": ", std::strerror(errno)));
    struct stat st {};
    void* data = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == length) {
      data = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    } else {
      errno = EINVAL;
    }
    const int err = errno;
    ::close(fd);
    if (data == MAP_FAILED) {
      throw IOError(cat("cannot map its buffer ", path, " (", length, " bytes): ", std::strerror(err)));
    }
    m = {generation, static_cast<char*>(data), length};
  }
  return m.data + offset;
}

void SharedBuffers::detach() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    base_ = nullptr;
  }
  unmap_peers();
}

void SharedBuffers::unmap_peers() {
  for (auto& row : mapped_) {
    for (Mapped& m : row) {
      if (m.data) ::munmap(m.data, m.bytes);
      m = {};
    }
  }
}

}  // namespace ddp::detail::shm
