// FileStore: an append-only log of records in one file, replayed into a map. Every operation
// holds an exclusive flock for its duration, so the log is never written by two processes at
// once; a record left half-written by a killed process is cut off by the next one to lock.
//
// Record: 1 byte type ('S' set, 'D' delete), u32 key length, key, u32 value length, value.
#include "ddp/file_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "ddp/error.h"
#include "store/kv_semantics.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;

namespace {
constexpr const char* kUsersKey = "__ddp/file_store/users";
constexpr auto kPollInterval = std::chrono::milliseconds(10);
}  // namespace

// The file opened and locked, with the cache brought up to date. Appends go to its end.
class FileStore::Locked {
 public:
  explicit Locked(FileStore& store) : store_(store) {
    fd_ = ::open(store.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw IOError(cat("FileStore: cannot open ", detail::quote(store.path_, 512), ": ", std::strerror(errno),
                        ". The directory must exist and be writable by every rank."));
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        int error = errno;
        ::close(fd_);
        throw IOError(cat("FileStore: cannot lock ", detail::quote(store.path_, 512), ": ", std::strerror(error),
                          ". The file system must support flock (NFS needs local locking off)."));
      }
    }
    replay();
  }

  ~Locked() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

  void append(char type, const std::string& key, const std::string& value) {
    std::string record(1, type);
    auto put = [&](const std::string& s) {
      std::uint32_t n = static_cast<std::uint32_t>(s.size());
      record.append(reinterpret_cast<const char*>(&n), 4);
      record += s;
    };
    put(key);
    put(value);
    off_t at = ::lseek(fd_, 0, SEEK_END);
    const char* p = record.data();
    std::size_t left = record.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        [[maybe_unused]] int rc = ::ftruncate(fd_, at);  // leave no partial record behind
        throw IOError(cat("FileStore: cannot write ", detail::quote(store_.path_, 512), ": ", std::strerror(errno)));
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    store_.offset_ = at + static_cast<off_t>(record.size());
    if (type == 'S') {
      store_.cache_[key] = value;
    } else {
      store_.cache_.erase(key);
    }
  }

  int fd() const { return fd_; }

 private:
  void replay() {
    struct stat st {};
    ::fstat(fd_, &st);
    if (st.st_size < store_.offset_) {  // the file was removed and made anew
      store_.cache_.clear();
      store_.offset_ = 0;
    }
    std::string data(static_cast<std::size_t>(st.st_size - store_.offset_), '\0');
    std::size_t got = 0;
    while (got < data.size()) {
      ssize_t n = ::pread(fd_, data.data() + got, data.size() - got, store_.offset_ + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    data.resize(got);
    std::size_t pos = 0;
    auto field = [&](std::string& out) {
      std::uint32_t n = 0;
      if (data.size() - pos < 4) return false;
      std::memcpy(&n, data.data() + pos, 4);
      if (data.size() - pos - 4 < n) return false;
      out.assign(data, pos + 4, n);
      pos += 4 + n;
      return true;
    };
    for (;;) {
      const std::size_t start = pos;
      std::string key, value;
      if (pos >= data.size()) break;
      const char type = data[pos++];
      if ((type != 'S' && type != 'D') || !field(key) || !field(value)) {
        // We hold the lock, so nobody is writing: this tail is a record cut short by a killed
        // writer (or garbage). Cut it off so that later appends stay readable.
        [[maybe_unused]] int rc = ::ftruncate(fd_, store_.offset_ + static_cast<off_t>(start));
        pos = start;
        break;
      }
      if (type == 'S') {
        store_.cache_[key] = std::move(value);
      } else {
        store_.cache_.erase(key);
      }
    }
    store_.offset_ += static_cast<off_t>(pos);
  }

  FileStore& store_;
  int fd_ = -1;
};

FileStore::FileStore(std::string path, int /*num_users*/) : path_(std::move(path)) {
  if (path_.empty()) throw InvalidArgument("FileStore: the path is empty");
  std::lock_guard guard(mutex_);
  Locked file(*this);
  std::string users = std::to_string(detail::apply_add(cache_, kUsersKey, 1));
  file.append('S', kUsersKey, users);
}

FileStore::~FileStore() {
  try {
    std::lock_guard guard(mutex_);
    Locked file(*this);
    auto users = detail::apply_add(cache_, kUsersKey, -1);
    if (users <= 0) {
      ::unlink(path_.c_str());  // the last user: leave nothing behind
    } else {
      file.append('S', kUsersKey, std::to_string(users));
    }
  } catch (...) {
  }
}

void FileStore::set(const std::string& key, const std::string& value) {
  std::lock_guard guard(mutex_);
  Locked(*this).append('S', key, value);
}

std::string FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  std::lock_guard guard(mutex_);
  Locked file(*this);
  return cache_.at(key);
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  std::lock_guard guard(mutex_);
  Locked file(*this);
  auto value = detail::apply_add(cache_, key, delta);
  file.append('S', key, std::to_string(value));
  return value;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  std::lock_guard guard(mutex_);
  Locked file(*this);
  auto copy = cache_;
  bool changed = false;
  auto value = detail::apply_compare_set(copy, key, expected, desired, changed);
  if (changed) file.append('S', key, desired);
  return value;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard guard(mutex_);
  Locked file(*this);
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return cache_.count(k) > 0; });
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<std::string> missing;
    {
      std::lock_guard guard(mutex_);
      Locked file(*this);
      for (const auto& key : keys) {
        if (!cache_.count(key)) missing.push_back(detail::quote(key));
      }
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(cat("FileStore ", detail::quote(path_, 512), ": wait timed out after ",
                             detail::format_duration(timeout), "; still missing: ", detail::join(missing)));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

bool FileStore::delete_key(const std::string& key) {
  std::lock_guard guard(mutex_);
  Locked file(*this);
  if (!cache_.count(key)) return false;
  file.append('D', key, {});
  return true;
}

std::int64_t FileStore::num_keys() {
  std::lock_guard guard(mutex_);
  Locked file(*this);
  return static_cast<std::int64_t>(cache_.size()) - (cache_.count(kUsersKey) ? 1 : 0);
}

std::shared_ptr<Store> FileStore::clone() {
  auto copy = std::make_shared<FileStore>(path_);
  copy->set_timeout(timeout_);
  return copy;
}

}  // namespace ddp
