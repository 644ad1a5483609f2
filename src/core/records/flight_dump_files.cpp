#include "records/flight_dump_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "ddp/error.h"
#include "records/flight_config.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr std::string_view kSuffix = ".flight";

bool is_dump_name(const std::string& name) {
  return name.size() > kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

// mkdir -p. Throws IOError naming the folder that could not be made.
void make_folders(const std::string& path) {
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos < path.size() && path[pos] != '/') continue;
    const std::string partial = path.substr(0, pos);
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw IOError(cat("flight recorder: cannot create the folder ", partial, " for the dump: ", std::strerror(errno),
                        ". Set ", kFlightDirVariable, " to a folder this process may write to"));
    }
  }
}

void write_file(const std::string& path, const std::string& text) {
  const std::string temp = cat(path, ".tmp", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IOError(cat("flight recorder: cannot create ", temp, ": ", std::strerror(errno)));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(temp.c_str());
      throw IOError(cat("flight recorder: cannot write ", temp, ": ", std::strerror(error)));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw IOError(cat("flight recorder: cannot rename ", temp, " to ", path, ": ", std::strerror(error)));
  }
}

}  // namespace

void write_dump_file(const std::string& dir, const std::string& path, const std::string& text) {
  make_folders(dir);
  write_file(path, text);
}

LoadedDumps load_dumps(const std::vector<std::string>& paths) {
  LoadedDumps out;
  std::vector<std::pair<std::string, FlightDump>> read;
  auto take = [&](const std::string& file) {
    ++out.files;
    try {
      read.emplace_back(file, read_dump(file));
    } catch (const Error& e) {
      out.problems.push_back(e.what());
    }
  };
  for (const auto& path : paths) {
    std::error_code error;
    if (!std::filesystem::is_directory(path, error)) {
      take(path);
      continue;
    }
    std::vector<std::string> files;
    for (auto it = std::filesystem::directory_iterator(path, error);
         !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (is_dump_name(name)) files.push_back(it->path().string());
    }
    if (error)
      out.problems.push_back(cat("flight recorder dumps: cannot list the folder ", path, ": ", error.message()));
    std::sort(files.begin(), files.end());
    for (const auto& file : files) take(file);
  }
  if (read.empty()) return out;
  // The run of the newest dump: its job id and attempt.
  const auto newest = std::max_element(
      read.begin(), read.end(), [](const auto& a, const auto& b) { return a.second.time_ns < b.second.time_ns; });
  const std::string job = newest->second.job;
  const int restart = newest->second.restart;
  std::map<int, std::pair<std::string, FlightDump>> by_rank;
  for (auto& [file, dump] : read) {
    if (dump.job != job || dump.restart != restart) {
      out.ignored.push_back(cat(file, ": another run's (job ", quote(dump.job), ", attempt ", dump.restart, ")"));
      continue;
    }
    auto it = by_rank.find(dump.rank);
    if (it == by_rank.end()) {
      by_rank.emplace(dump.rank, std::make_pair(file, std::move(dump)));
    } else {
      const bool newer = dump.time_ns > it->second.second.time_ns;
      out.ignored.push_back(cat(newer ? it->second.first : file, ": rank ", dump.rank, " again, older than ",
                                newer ? file : it->second.first));
      if (newer) it->second = {file, std::move(dump)};
    }
  }
  for (auto& [rank, entry] : by_rank) out.dumps.push_back(std::move(entry.second));
  return out;
}

}  // namespace ddp::detail
