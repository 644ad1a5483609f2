#include "reports/blame.h"

#include <algorithm>
#include <fstream>

#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

namespace {

// What the summary quotes of a record: its diagnosis, else the whole error.
std::string excerpt(const detail::FailureRecord& record) {
  return detail::quote(record.detail.empty() ? record.message : record.detail, 240);
}

}  // namespace

bool mentions_timeout(std::string_view line) {
  const std::string lower = detail::lower(std::string(line));
  return lower.find("timed out") != std::string::npos || lower.find(" did not join within ") != std::string::npos;
}

namespace {

// ranks_waited_for with the failed rank's record already read (the store is asked once for it).
std::vector<int> waited_for(int failed_rank, const std::optional<detail::FailureRecord>& record,
                            const FailureLookup& records) {
  if (!record) return {};
  if (record->first >= 0 && record->first != failed_rank) {
    // It failed of rank N's earlier failure: whom N waited for, else N itself.
    const auto earlier = records(record->first);
    auto ranks = earlier ? detail::waited_for(*earlier) : std::vector<int>{};
    std::erase(ranks, record->first);
    return ranks.empty() ? std::vector<int>{record->first} : ranks;
  }
  return detail::waited_for(*record);
}

}  // namespace

std::vector<int> ranks_waited_for(int failed_rank, const FailureLookup& records) {
  return waited_for(failed_rank, records(failed_rank), records);
}

std::optional<Culprit> find_root_cause(int failed_rank, const FailureLookup& records,
                                       const std::vector<std::string>& error_lines,
                                       const std::vector<SuspendedWorker>& suspended) {
  const auto record = records(failed_rank);
  std::vector<int> named = waited_for(failed_rank, record, records);
  std::erase(named, failed_rank);
  const std::string quoted = record ? excerpt(*record) : "";
  bool timeout = record && record->kind == detail::ErrorKind::Timeout;
  for (const auto& line : error_lines) timeout = timeout || mentions_timeout(line);
  auto names = [&](int rank) { return std::find(named.begin(), named.end(), rank) != named.end(); };
  for (const auto& s : suspended) {
    if (s.rank == failed_rank || !names(s.rank)) continue;
    return Culprit{s.rank,
                   cat("ddprun found rank ", s.rank, " ", s.state, " when rank ", failed_rank, " failed, and rank ",
                       failed_rank, "'s error says it waited for rank ", s.rank, ": ", quoted)};
  }
  if (!named.empty()) {
    return Culprit{named.front(),
                   cat("rank ", failed_rank, "'s error says it waited for rank ", named.front(), ": ", quoted)};
  }
  if (!timeout) return std::nullopt;
  for (const auto& s : suspended) {
    if (s.rank == failed_rank) continue;
    return Culprit{s.rank, cat("ddprun found rank ", s.rank, " ", s.state, " when rank ", failed_rank,
                               " failed with a timeout (its error names no rank it waited for)")};
  }
  return std::nullopt;
}

char stat_state(std::string_view stat_text) {
  // "PID (COMMAND) STATE ...": the command may hold spaces and parentheses, so the last ')'.
  const std::size_t paren = stat_text.rfind(')');
  if (paren == std::string_view::npos || paren + 2 >= stat_text.size() || stat_text[paren + 1] != ' ') return 0;
  return stat_text[paren + 2];
}

char process_state(pid_t pid) {
  std::ifstream in(cat("/proc/", pid, "/stat"));
  std::string text;
  std::getline(in, text);
  return stat_state(text);
}

std::optional<std::string> stopped_state(pid_t pid) {
  const std::string path = cat("/proc/", pid, "/stat");
  const char state = process_state(pid);
  if (state == 'T') return cat("suspended (state T in ", path, ")");
  if (state == 't') return cat("suspended by a debugger (state t, a tracing stop, in ", path, ")");
  return std::nullopt;
}

}  // namespace ddp::launcher
