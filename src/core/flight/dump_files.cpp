#include "flight/dump_files.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr std::string_view kSuffix = ".flight";

bool is_dump_name(const std::string& name) {
  return name.size() > kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

}  // namespace

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
    for (auto it = std::filesystem::directory_iterator(path, error); !error && it != std::filesystem::directory_iterator();
         it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (is_dump_name(name)) files.push_back(it->path().string());
    }
    if (error) out.problems.push_back(cat("flight recorder dumps: cannot list the folder ", path, ": ", error.message()));
    std::sort(files.begin(), files.end());
    for (const auto& file : files) take(file);
  }
  if (read.empty()) return out;
  // The run of the newest dump: its job id and attempt.
  const auto newest = std::max_element(read.begin(), read.end(),
                                       [](const auto& a, const auto& b) { return a.second.time_ns < b.second.time_ns; });
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
