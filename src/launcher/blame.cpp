#include "blame.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

namespace {

// "<word>N" at `pos` (digits only): N, and `pos` moved past it.
std::optional<int> read_number(std::string_view text, std::size_t& pos, std::string_view word) {
  if (text.substr(pos, word.size()) != word) return std::nullopt;
  std::size_t end = pos + word.size();
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  auto number = detail::parse_int(text.substr(pos + word.size(), end - pos - word.size()));
  if (!number || *number < 0 || *number > 1'000'000'000) return std::nullopt;
  pos = end;
  return static_cast<int>(*number);
}

// "rank N" or "rank N (global rank G)" at `pos`: the global rank, and `pos` moved past it.
std::optional<int> read_rank(std::string_view text, std::size_t& pos) {
  auto rank = read_number(text, pos, "rank ");
  if (!rank) return std::nullopt;
  std::size_t at = pos;
  auto global = read_number(text, at, " (global rank ");
  if (global && at < text.size() && text[at] == ')') {
    pos = at + 1;
    return global;
  }
  return rank;
}

// A list of ranks that starts at `pos` ("rank A..."), its items separated by `separator` (each
// next item starting with "rank "), before `stop` (npos: the end of the text).
void read_list(std::string_view text, std::size_t pos, std::string_view separator, std::size_t stop,
               std::vector<int>& out) {
  for (;;) {
    auto rank = read_rank(text, pos);
    if (!rank) return;
    out.push_back(*rank);
    const std::string next = cat(separator, "rank ");
    const std::size_t at = text.find(next, pos);
    if (at == std::string_view::npos || at >= stop) return;
    // Items may carry text after the rank ("rank 1: its last was ..."); skip to the next one.
    pos = at + separator.size();
  }
}

std::size_t find_or_end(std::string_view text, std::string_view what, std::size_t from) {
  const std::size_t at = text.find(what, from);
  return at == std::string_view::npos ? text.size() : at;
}

// The diagnosis patterns of ddp's core (group/diagnosis.cpp, shm/sync.cpp).
void read_diagnosis(std::string_view text, std::vector<int>& out) {
  const std::string_view behind = "Ranks that had not reached ";
  for (std::size_t at = text.find(behind); at != std::string_view::npos; at = text.find(behind, at + 1)) {
    const std::size_t stop = find_or_end(text, ". Such a rank", at);
    const std::size_t list = text.find(": rank ", at);
    if (list < stop) read_list(text, list + 2, "; ", stop, out);
  }
  const std::string_view inside = "still inside it: ";
  for (std::size_t at = text.find(inside); at != std::string_view::npos; at = text.find(inside, at + 1)) {
    const std::size_t start = at + inside.size();
    read_list(text, start, ", ", find_or_end(text, ". ", start), out);
  }
  for (std::size_t at = text.find("Lost rank"); at != std::string_view::npos; at = text.find("Lost rank", at + 1)) {
    const std::size_t stop = find_or_end(text, ": its connection to the store closed", at);
    if (text.substr(at, 12) == "Lost ranks: ") {
      read_list(text, at + 12, "; ", stop, out);
    } else {
      read_list(text, at + 5, "; ", stop, out);  // "Lost rank N (...)": one
    }
  }
  const std::string_view waited = "waited for rank ";
  for (std::size_t at = text.find(waited); at != std::string_view::npos; at = text.find(waited, at + 1)) {
    const std::size_t start = at + 11;
    read_list(text, start, ", ", find_or_end(text, ", which did not arrive", start), out);
  }
  // group/join.cpp: "group 'world': rank 1 of 2 did not join within 5.0 s" ("ranks 0, 3 of 4 ...").
  const std::string_view absent = " did not join within ";
  for (std::size_t at = text.find(absent); at != std::string_view::npos; at = text.find(absent, at + 1)) {
    const std::size_t of = text.rfind(" of ", at);
    const std::size_t head = text.rfind("': rank", at);
    if (of == std::string_view::npos || head == std::string_view::npos || of < head) continue;
    std::size_t pos = head + 3;
    const std::string_view word = text.substr(pos, 6) == "ranks " ? "ranks " : "rank ";
    pos += word.size();
    for (;;) {
      auto rank = read_number(text, pos, "");
      if (!rank || pos > of) break;
      out.push_back(*rank);
      if (text.substr(pos, 2) != ", ") break;
      pos += 2;
    }
  }
}

// The diagnosis part of an error line, quoted for the summary.
std::string excerpt(std::string_view line) {
  std::size_t from = std::string_view::npos;
  auto earliest = [&](std::size_t at) { from = std::min(from, at); };
  for (std::string_view marker : {"Ranks that had not reached", "Every rank reached", "Lost rank", "waited for rank"}) {
    earliest(line.find(marker));
  }
  if (line.find(" did not join within ") != std::string_view::npos) earliest(line.find("group '"));
  const std::size_t first = line.find(" failed first: ");
  if (first != std::string_view::npos) earliest(line.rfind("Rank ", first));
  return detail::quote(line.substr(from == std::string_view::npos ? 0 : from), 240);
}

bool mentions_timeout(std::string_view line) {
  const std::string lower = detail::lower(std::string(line));
  return lower.find("timed out") != std::string::npos || lower.find(" did not join within ") != std::string::npos;
}

}  // namespace

std::vector<int> ranks_waited_for(std::string_view text) {
  std::vector<int> ranks;
  const std::string_view first = " failed first: ";
  const std::size_t at = text.find(first);
  if (at != std::string_view::npos) {
    // "Rank N failed first: <N's message>": whom N waited for, else N itself.
    std::size_t pos = text.rfind("Rank ", at);
    if (pos != std::string_view::npos) {
      if (auto n = read_number(text, pos, "Rank ")) {
        if (pos == at) {
          ranks = ranks_waited_for(text.substr(at + first.size()));
          if (ranks.empty()) ranks.push_back(*n);
          return ranks;
        }
      }
    }
  }
  read_diagnosis(text, ranks);
  std::vector<int> unique;
  for (int r : ranks) {
    if (std::find(unique.begin(), unique.end(), r) == unique.end()) unique.push_back(r);
  }
  return unique;
}

bool may_name_ranks_waited_for(std::string_view line) {
  for (std::string_view marker : {"Ranks that had not reached", "still inside it: ", "Lost rank", "waited for rank ",
                                  " failed first: "}) {
    if (line.find(marker) != std::string_view::npos) return true;
  }
  return mentions_timeout(line);
}

std::optional<Culprit> find_root_cause(int failed_rank, const std::vector<std::string>& error_lines,
                                       const std::vector<SuspendedWorker>& suspended) {
  // The last line that names anyone is the newest diagnosis (the error is often logged, then
  // printed again by the program).
  std::vector<int> named;
  std::string quoted;
  bool timeout = false;
  for (const auto& line : error_lines) {
    timeout = timeout || mentions_timeout(line);
    auto ranks = ranks_waited_for(line);
    ranks.erase(std::remove(ranks.begin(), ranks.end(), failed_rank), ranks.end());
    if (!ranks.empty()) {
      named = std::move(ranks);
      quoted = excerpt(line);
    }
  }
  auto names = [&](int rank) { return std::find(named.begin(), named.end(), rank) != named.end(); };
  for (const auto& s : suspended) {
    if (s.rank == failed_rank || !names(s.rank)) continue;
    return Culprit{s.rank, cat("ddprun found rank ", s.rank, " ", s.state, " when rank ", failed_rank,
                               " failed, and rank ", failed_rank, "'s error says it waited for rank ", s.rank, ": ",
                               quoted)};
  }
  if (!named.empty()) {
    return Culprit{named.front(), cat("rank ", failed_rank, "'s error says it waited for rank ", named.front(), ": ",
                                      quoted)};
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
