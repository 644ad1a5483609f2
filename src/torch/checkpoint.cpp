// Checkpoint files: "DDPCKPT1", payload length (u64), CRC-32 of the payload (u32), then the
// payload (a torch::serialize archive).
#include "ddp/torch/checkpoint.h"

#include <c10/util/Exception.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "util/log.h"
#include "checkpoint_variables.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;
using detail::quote;

namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '1'};
constexpr std::size_t kHeader = 8 + 8 + 4;

std::uint32_t crc32_of(const std::string& data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t done = 0;
  while (done < data.size()) {  // zlib takes 32-bit lengths
    const auto n = static_cast<uInt>(std::min<std::size_t>(data.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), n);
    done += n;
  }
  return static_cast<std::uint32_t>(crc);
}

void make_directories(const std::string& path) {
  std::string partial;
  std::stringstream parts(path);
  if (!path.empty() && path.front() == '/') partial = "/";
  for (std::string part; std::getline(parts, part, '/');) {
    if (part.empty()) continue;
    partial += part + "/";
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw IOError(cat("checkpoints: cannot create the directory ", quote(partial, 512), ": ", std::strerror(errno)));
    }
  }
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string directory_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, std::max<std::size_t>(slash, 1));
}

// The step in "<prefix>-<digits>.ckpt", or -1.
std::int64_t step_of(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "-", tail = ".ckpt";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
    return -1;
  }
  auto step = detail::parse_int(std::string_view(name).substr(head.size(), name.size() - head.size() - tail.size()));
  return step ? *step : -1;
}

// The payload of a checkpoint file, or an explanation of why it is unusable.
std::string read_payload(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError(cat("cannot open: ", std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    throw IOError(bytes.size() < kHeader ? cat("truncated: only ", bytes.size(), " bytes, shorter than the header")
                                         : std::string("not a ddp checkpoint (bad magic)"));
  }
  std::uint64_t length = 0;
  std::uint32_t crc = 0;
  std::memcpy(&length, bytes.data() + 8, 8);
  std::memcpy(&crc, bytes.data() + 16, 4);
  if (bytes.size() - kHeader != length) {
    throw IOError(
        cat("truncated: the header announces ", length, " bytes of data but the file holds ", bytes.size() - kHeader));
  }
  std::string payload = bytes.substr(kHeader);
  if (crc32_of(payload) != crc) throw IOError("damaged: the CRC-32 of its contents does not match");
  return payload;
}

// Under ddprun, DDP_CHECKPOINT_RECORD (`record`: the group's settings, or the process's without
// a group) names a file where the launcher looks for the last checkpoint when the job is stopped,
// to say where it can resume. Not being able to write it costs only that sentence, so it is
// logged, not thrown.
void record_for_launcher(const std::string& record, std::int64_t step, const std::string& path) {
  if (record.empty()) return;
  std::error_code ignored;
  const auto absolute = std::filesystem::absolute(path, ignored);
  try {
    write_file_atomically(record, cat("step=", step, "\npath=", absolute.empty() ? path : absolute.string(), "\n"));
  } catch (const std::exception& e) {
    detail::log(detail::LogLevel::Warn, "cannot record checkpoint ", quote(path, 512),
                " for the launcher (DDP_CHECKPOINT_RECORD): ", e.what());
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& payload) {
  const std::string temp = cat(path, ".tmp.", ::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IOError(cat("cannot create ", quote(temp, 512), ": ", std::strerror(errno)));
  const char* p = payload.data();
  std::size_t left = payload.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      throw IOError(cat("cannot write ", quote(temp, 512), ": ", std::strerror(error),
                        error == ENOSPC ? " (the disk is full; the previous checkpoints are untouched)" : ""));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw IOError(cat("cannot flush ", quote(temp, 512), " to disk: ", std::strerror(error)));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw IOError(cat("cannot rename ", quote(temp, 512), " to ", quote(path, 512), ": ", std::strerror(error)));
  }
  fsync_directory(directory_of(path));
}

Checkpoints::Checkpoints(CheckpointOptions options) : options_(std::move(options)) {
  if (options_.directory.empty()) throw InvalidArgument("Checkpoints: the directory is empty");
  if (options_.keep < 1) throw InvalidArgument(cat("Checkpoints: keep must be at least 1, got ", options_.keep));
  if (options_.prefix.empty() || options_.prefix.find('/') != std::string::npos) {
    throw InvalidArgument(cat("Checkpoints: the prefix ", quote(options_.prefix), " must be a plain, non-empty name"));
  }
}

std::string Checkpoints::save(std::int64_t step, const std::function<void(torch::serialize::OutputArchive&)>& write,
                              const std::shared_ptr<ProcessGroup>& group) {
  if (step < 0) throw InvalidArgument(cat("Checkpoints::save: the step must not be negative, got ", step));
  auto g = group ? group : (is_initialized() ? get_default_group() : nullptr);
  char name[64];
  std::snprintf(name, sizeof name, "-%012lld.ckpt", static_cast<long long>(step));
  const std::string path = options_.directory + "/" + options_.prefix + name;
  std::exception_ptr failure;
  if (!g || g->rank() == 0) {
    try {
      torch::serialize::OutputArchive archive;
      write(archive);
      std::ostringstream out;
      archive.save_to(out);
      const std::string payload = out.str();
      std::string file(kMagic, 8);
      const std::uint64_t length = payload.size();
      const std::uint32_t crc = crc32_of(payload);
      file.append(reinterpret_cast<const char*>(&length), 8);
      file.append(reinterpret_cast<const char*>(&crc), 4);
      file += payload;
      make_directories(options_.directory);
      write_file_atomically(path, file);
      auto files = list();
      for (std::size_t i = static_cast<std::size_t>(options_.keep); i < files.size(); ++i) ::unlink(files[i].c_str());
      remove_stale_temporaries();
      detail::VariableProblems ignored;  // text
      const auto variables = detail::with_overrides(g ? g->variables() : std::map<std::string, std::string>{});
      record_for_launcher(detail::read_variables(detail::kCheckpointVariables, variables, ignored).record, step, path);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // Everyone meets here (also when rank 0 failed, so that nobody waits for a barrier in vain).
  if (g) g->barrier(Launch::OnWait)->wait();
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw IOError(cat("checkpoint ", quote(path, 512), " could not be written: ", e.what()));
    }
  }
  return path;
}

std::optional<LoadedCheckpoint> Checkpoints::load_latest(
    const std::function<void(torch::serialize::InputArchive&)>& read) const {
  LoadedCheckpoint loaded;
  std::size_t damaged = 0, unreadable = 0;
  auto skip = [&](const std::string& path, std::string reason, std::size_t& count) {
    reason = reason.substr(0, reason.find('\n'));  // LibTorch's errors carry a stack trace
    detail::log(detail::LogLevel::Error, "checkpoint ", quote(path, 512), " cannot be used (", reason,
                "); trying the previous one");
    loaded.skipped.push_back(cat(path, ": ", reason));
    ++count;
  };
  for (const auto& path : list()) {
    std::string payload;
    try {
      payload = read_payload(path);
    } catch (const IOError& e) {
      skip(path, e.what(), damaged);
      continue;
    }
    // The bytes are the ones written (the CRC matched). What `read` throws is either the reader's
    // format error (LibTorch's: an entry missing or of another type), which an older checkpoint
    // may not have, an IOError (damage `read` found), or a refusal (any other ddp::Error, any
    // other exception: another batch size, another model), which an older file would meet
    // again and which must reach the caller as itself.
    try {
      std::istringstream in(payload);
      torch::serialize::InputArchive archive;
      archive.load_from(in);
      read(archive);
    } catch (const IOError& e) {
      skip(path, e.what(), damaged);
      continue;
    } catch (const c10::Error& e) {
      skip(path, cat("intact, but not what this program reads: ", e.what()), unreadable);
      continue;
    }
    loaded.path = path;
    const auto slash = path.rfind('/');
    loaded.step = step_of(slash == std::string::npos ? path : path.substr(slash + 1), options_.prefix);
    return loaded;
  }
  if (!loaded.skipped.empty()) {
    throw IOError(
        cat("no usable checkpoint in ", quote(options_.directory, 512), ": ", detail::join(loaded.skipped, "; "), ".",
            damaged > 0 ? " Delete the damaged files to start from scratch, or restore them from a copy." : "",
            unreadable > 0 ? " The intact ones hold other entries than this program reads: read them with "
                             "the program (and version) that wrote them, or save to another directory."
                           : ""));
  }
  return std::nullopt;
}

// Temporary files left by a writer that was killed mid-save (ours are renamed or removed).
void Checkpoints::remove_stale_temporaries() const {
  if (DIR* dir = ::opendir(options_.directory.c_str())) {
    const std::string head = options_.prefix + "-";
    while (dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.compare(0, head.size(), head) == 0 && name.find(".ckpt.tmp.") != std::string::npos) {
        ::unlink((options_.directory + "/" + name).c_str());
      }
    }
    ::closedir(dir);
  }
}

std::vector<std::string> Checkpoints::list() const {
  std::vector<std::pair<std::int64_t, std::string>> found;
  if (DIR* dir = ::opendir(options_.directory.c_str())) {
    while (dirent* entry = ::readdir(dir)) {
      const std::int64_t step = step_of(entry->d_name, options_.prefix);
      if (step >= 0) found.emplace_back(step, options_.directory + "/" + entry->d_name);
    }
    ::closedir(dir);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

}  // namespace ddp
