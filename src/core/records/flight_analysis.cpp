#include "records/flight_analysis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "util/strings.h"

namespace ddp::detail {
namespace {

using Kind = FlightFinding::Kind;

std::string ranks_phrase(const std::vector<int>& ranks) {
  return cat(ranks.size() == 1 ? "rank " : "ranks ", join(ranks));
}

std::string ns_text(std::int64_t ns) {
  char text[32];
  if (ns >= 1'000'000'000) {
    std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ns) / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%.1f ms", static_cast<double>(ns) / 1e6);
  }
  return text;
}

std::string shorten(std::string text, std::size_t limit) {
  if (text.size() > limit) text = text.substr(0, limit - 3) + "...";
  return text;
}

// A group across dumps: its name and which group of that name it is in each process (the
// second 'world' of a re-initialized job is another group).
using GroupKey = std::pair<std::string, int>;

// The dump's groups with their keys, in the order the process joined them.
std::vector<std::pair<GroupKey, std::uint32_t>> groups_of(const FlightDump& d) {
  std::vector<std::pair<GroupKey, std::uint32_t>> keys;
  std::map<std::string, int> seen;
  for (std::uint32_t i = 0; i < d.groups.size(); ++i) keys.push_back({{d.groups[i].name, seen[d.groups[i].name]++}, i});
  return keys;
}

// One rank as one group sees it.
struct Member {
  int rank = 0;
  const FlightDump* dump = nullptr;                     // null: no dump
  bool elsewhere = false;                               // no dump expected here
  bool unknown = false;                                 // its dump kept none of the group's entries (the ring moved on)
  std::map<std::uint64_t, const FlightEntry*> entries;  // the group's collectives, by sequence number
  std::uint64_t known_from = 0;                         // earlier ones were dropped from its ring
  std::uint64_t issued = 0;                             // 1 + the last sequence number it called

  bool present() const { return dump && !unknown; }
  const FlightEntry* at(std::uint64_t seq) const {
    auto it = entries.find(seq);
    return it == entries.end() ? nullptr : it->second;
  }
};

struct GroupView {
  std::string name;
  const FlightGroup* group = nullptr;  // as the first dump that names it has it
  std::vector<Member> members;
};

GroupView view_of(const GroupKey& key, const FlightGroup& group, const std::map<int, const FlightDump*>& by_rank,
                  const std::set<int>& elsewhere) {
  GroupView view{key.first, &group, {}};
  for (int rank : group.global_ranks) {
    Member m;
    m.rank = rank;
    if (auto it = by_rank.find(rank); it != by_rank.end()) m.dump = it->second;
    m.elsewhere = !m.dump && elsewhere.count(rank) > 0;
    if (m.dump) {
      for (const auto& [k, index] : groups_of(*m.dump)) {
        if (k != key) continue;
        for (const auto& e : m.dump->entries) {
          if (e.group == index && to_op(e).is_collective()) m.entries[e.seq] = &e;
        }
      }
      const bool complete = m.dump->recorded == m.dump->entries.size();
      m.unknown = !complete && m.entries.empty();
      m.known_from = complete || m.entries.empty() ? 0 : m.entries.begin()->first;
      m.issued = m.entries.empty() ? 0 : m.entries.rbegin()->first + 1;
    }
    view.members.push_back(std::move(m));
  }
  return view;
}

std::vector<int> ranks_where(const GroupView& g, bool (*test)(const Member&)) {
  std::vector<int> out;
  for (const auto& m : g.members) {
    if (test(m)) out.push_back(m.rank);
  }
  return out;
}

// The last rank to start `seq` among those that did, and how long after the first.
std::pair<int, std::int64_t> last_to_arrive(const GroupView& g, std::uint64_t seq) {
  int last = -1;
  std::int64_t first_ns = 0, last_ns = 0;
  for (const auto& m : g.members) {
    const FlightEntry* e = m.present() ? m.at(seq) : nullptr;
    if (!e || e->started_ns == 0) continue;
    if (last < 0 || e->started_ns < first_ns) first_ns = e->started_ns;
    if (last < 0 || e->started_ns > last_ns) {
      last_ns = e->started_ns;
      last = m.rank;
    }
  }
  return {last, last_ns - first_ns};
}

std::string last_of(const GroupView& g, const Member& m) {
  if (m.entries.empty()) return "it called no collective in this group";
  const FlightEntry& e = *m.entries.rbegin()->second;
  return cat("its last was ", describe(e, *g.group), ", ", to_string(e.state));
}

// The first sequence number at which the group's ranks part ways, with the lines that say how.
FlightFinding examine(const GroupView& g, std::vector<std::string>& lines) {
  FlightFinding f;
  f.group = g.name;
  const std::string where = cat("group '", g.name, "' (", g.members.size(), " ranks",
                                is_keyed(*g.group) ? cat("; ", g.group->backend) : std::string(), ")");
  std::uint64_t from = 0;
  std::set<std::uint64_t> seqs;
  for (const auto& m : g.members) {
    if (!m.present()) continue;
    from = std::max(from, m.known_from);
    for (const auto& [seq, e] : m.entries) seqs.insert(seq);
  }
  const auto absent = ranks_where(g, [](const Member& m) { return !m.dump && !m.elsewhere; });
  const auto elsewhere = ranks_where(g, [](const Member& m) { return m.elsewhere; });
  std::uint64_t last_done = 0;
  bool any_done = false;
  for (std::uint64_t s : seqs) {
    if (s < from) continue;
    std::map<Fingerprint, std::vector<int>> calls;  // what each rank called at s
    std::map<Fingerprint, const FlightEntry*> example;
    std::vector<int> lacking, unfinished;
    for (const auto& m : g.members) {
      if (!m.present()) continue;
      if (const FlightEntry* e = m.at(s)) {
        const auto print = fingerprint(to_op(*e));
        calls[print].push_back(m.rank);
        example.emplace(print, e);
        if (e->state != FlightState::Finished) unfinished.push_back(m.rank);
      } else if (m.issued <= s) {
        lacking.push_back(m.rank);
      }
    }
    if (calls.size() > 1) {
      f.kind = Kind::Mismatch;
      f.seq = s;
      std::size_t most = 0, with_most = 0;
      for (const auto& [print, ranks] : calls) {
        with_most = ranks.size() > most ? 1 : ranks.size() == most ? with_most + 1 : with_most;
        most = std::max(most, ranks.size());
      }
      std::vector<std::string> parts;
      for (const auto& [print, ranks] : calls) {
        parts.push_back(cat(ranks_phrase(ranks), " called ", describe(*example[print], *g.group)));
        if (with_most > 1 || ranks.size() < most) f.ranks.insert(f.ranks.end(), ranks.begin(), ranks.end());
      }
      std::sort(f.ranks.begin(), f.ranks.end());
      lines.push_back(
          cat(where, ": the ranks called different collectives at sequence number ", s, ": ", join(parts, "; ")));
      return f;
    }
    const FlightEntry* called = calls.empty() ? nullptr : example.begin()->second;
    if (!lacking.empty() && called) {
      f.kind = Kind::NotReached;
      f.seq = s;
      f.ranks = lacking;
      std::vector<int> did = calls.begin()->second;
      lines.push_back(cat(where, ": ", ranks_phrase(did), " called ", describe(*called, *g.group), "; ",
                          ranks_phrase(lacking), " never did"));
      for (const auto& m : g.members) {
        if (std::find(lacking.begin(), lacking.end(), m.rank) != lacking.end()) {
          lines.push_back(cat("  rank ", m.rank, ": ", last_of(g, m),
                              " (stopped, busy outside ddp's collectives, or "
                              "out of the loop early?)"));
        }
      }
      return f;
    }
    if (unfinished.empty()) {  // every dump says it finished: the ranks without one took part in it too
      last_done = s;
      any_done = true;
      continue;
    }
    f.seq = s;
    const std::vector<int> waited = calls.empty() ? std::vector<int>{} : calls.begin()->second;
    const std::string before =
        any_done ? cat("; every collective before it finished (the last: #", last_done, ")") : "";
    if (!absent.empty()) {
      f.kind = Kind::NoDump;
      f.ranks = absent;
      lines.push_back(cat(where, ": ", ranks_phrase(waited), " waited at ", describe(*called, *g.group),
                          ", which never finished", before));
      lines.push_back(cat("  ", ranks_phrase(absent), " left no dump: killed, or stopped before ",
                          absent.size() == 1 ? "it" : "they", " could write one"));
      return f;
    }
    const auto [late, after] = last_to_arrive(g, s);
    if (!elsewhere.empty()) {
      f.kind = Kind::Stuck;
      f.ranks = elsewhere;
      lines.push_back(cat(where, ": ", ranks_phrase(waited), " waited at ", describe(*called, *g.group),
                          ", which never finished", before, "; the dumps of ", ranks_phrase(elsewhere),
                          " are on their own nodes"));
      return f;
    }
    f.kind = Kind::Stuck;
    if (late >= 0) f.ranks = {late};
    lines.push_back(cat(where, ": every rank reached ", describe(*called, *g.group), " and it did not finish", before,
                        late >= 0
                            ? cat("; the last to arrive was rank ", late, ", ", ns_text(after), " after the first")
                            : std::string()));
    return f;
  }
  if (!absent.empty()) {
    f.kind = Kind::NoDump;
    f.ranks = absent;
    f.seq = any_done ? last_done + 1 : 0;
    lines.push_back(cat(where, ": ", ranks_phrase(absent), " left no dump (killed, or stopped before ",
                        absent.size() == 1 ? "it" : "they", " could write one); the others finished ",
                        any_done ? cat("every collective they recorded, up to #", last_done) : std::string("nothing")));
    return f;
  }
  return f;
}

// "slowest to arrive" over the collectives every dump recorded as finished.
void slow_arrivals(const GroupView& g, std::vector<std::string>& lines) {
  std::set<std::uint64_t> seqs;
  for (const auto& m : g.members) {
    if (m.present()) {
      for (const auto& [seq, e] : m.entries) seqs.insert(seq);
    }
  }
  std::map<int, std::vector<std::int64_t>> late;  // rank -> how long after the first, where it was last
  int considered = 0;
  for (std::uint64_t s : seqs) {
    bool all = true;
    for (const auto& m : g.members) {
      const FlightEntry* e = m.present() ? m.at(s) : nullptr;
      all = all && e && e->started_ns > 0;
    }
    if (!all) continue;
    ++considered;
    const auto [rank, after] = last_to_arrive(g, s);
    late[rank].push_back(after);
  }
  if (considered < 3 || g.members.size() < 2) return;
  for (auto& [rank, delays] : late) {
    if (3 * delays.size() < 2 * static_cast<std::size_t>(considered)) continue;
    std::sort(delays.begin(), delays.end());
    const std::int64_t median = delays[delays.size() / 2];
    if (median < 1'000'000) continue;  // under a millisecond: noise
    lines.push_back(cat("slowest to arrive in group '", g.name, "': rank ", rank, ", the last at ", delays.size(),
                        " of ", considered, " collectives, a median ", ns_text(median), " after the first"));
  }
}

std::string verdict(const FlightFinding& f) {
  const std::string at = cat(" at sequence number ", f.seq, " of group '", f.group, "'");
  switch (f.kind) {
    case Kind::None: return "";
    case Kind::Mismatch: return cat("=> ", ranks_phrase(f.ranks), at, ": called a different collective");
    case Kind::NotReached: return cat("=> ", ranks_phrase(f.ranks), at, ": never called it");
    case Kind::NoDump: return cat("=> ", ranks_phrase(f.ranks), at, ": missing (no dump)");
    case Kind::Stuck:
      return f.ranks.empty() ? cat("=> nobody in particular", at, ": every rank was there")
                             : cat("=> ", ranks_phrase(f.ranks), at, ": the last to arrive, or not seen here");
  }
  return "";
}

}  // namespace

FlightReport analyze(const std::vector<FlightDump>& dumps, const std::vector<int>& elsewhere_list) {
  FlightReport report;
  std::map<int, const FlightDump*> by_rank;
  for (const auto& d : dumps) by_rank.emplace(d.rank, &d);
  const std::set<int> elsewhere(elsewhere_list.begin(), elsewhere_list.end());
  if (by_rank.empty()) {
    report.lines.push_back("no flight recorder dumps to read");
    return report;
  }
  // Every group any dump names, in the order of the lowest rank's dump that names it.
  std::vector<std::pair<GroupKey, const FlightGroup*>> groups;
  std::set<GroupKey> seen;
  std::set<int> ranks;  // every rank a group names (not a range: a damaged dump may name rank 2^31 - 1)
  for (const auto& [rank, d] : by_rank) {
    ranks.insert(rank);
    for (const auto& [key, index] : groups_of(*d)) {
      const FlightGroup& g = d->groups[index];
      ranks.insert(g.global_ranks.begin(), g.global_ranks.end());
      if (seen.insert(key).second) groups.emplace_back(key, &g);
    }
  }
  std::vector<int> missing, away;
  for (int r : ranks) {
    if (by_rank.count(r)) continue;
    (elsewhere.count(r) ? away : missing).push_back(r);
  }
  std::string head = cat("dumps from ", by_rank.size(), " of ", ranks.size(), " ranks");
  if (!missing.empty()) head += cat("; none from ", ranks_phrase(missing));
  if (!away.empty()) head += cat("; ", ranks_phrase(away), " ran on other nodes");
  report.lines.push_back(head);
  const FlightDump* first = nullptr;
  for (const auto& [rank, d] : by_rank) {
    if (!first || d->time_ns < first->time_ns) first = d;
  }
  report.lines.push_back(cat("first dump: rank ", first->rank, " (pid ", first->pid, " on ", first->host,
                             "): ", shorten(first->reason, 240)));
  for (const auto& [key, group] : groups) {
    const GroupView view = view_of(key, *group, by_rank, elsewhere);
    std::vector<std::string> lines;
    FlightFinding f = examine(view, lines);
    slow_arrivals(view, lines);
    if (f.kind == Kind::None && report.finding.kind == Kind::None && !lines.empty()) {
      report.lines.insert(report.lines.end(), lines.begin(), lines.end());
    }
    if (f.kind != Kind::None && report.finding.kind == Kind::None) {
      report.finding = f;
      report.lines.insert(report.lines.end(), lines.begin(), lines.end());
    }
  }
  if (report.finding.kind == Kind::None) {
    report.lines.push_back("=> the ranks agree: every recorded collective was called by every rank and finished");
  } else {
    report.lines.push_back(verdict(report.finding));
  }
  return report;
}

}  // namespace ddp::detail
