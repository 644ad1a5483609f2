// Reading whom a failed worker waited for from its failure record, and choosing the root cause
// from the evidence. The records are the core's own (group/diagnosis.cpp's diagnose() run on peer
// states, as a failing rank runs it); Failure.* and MultiNode.* check the same end to end, with
// the records real workers leave in the job's store.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "reports/blame.h"
#include "group/diagnosis.h"

namespace ddp::launcher {
namespace {

using detail::ErrorKind;
using detail::FailureRecord;
using Ranks = std::vector<int>;

struct Records {
  std::map<int, FailureRecord> by_rank;
  FailureLookup lookup() const {
    return [this](int rank) -> std::optional<FailureRecord> {
      const auto it = by_rank.find(rank);
      if (it == by_rank.end()) return std::nullopt;
      return it->second;
    };
  }
};

// The record rank `rank` of a group of `global_ranks` writes when `op` fails with `kind`, the
// peers being in `peers` (group ranks' progress and lost-rank records).
FailureRecord core_record(ErrorKind kind, const detail::Op& op, int rank, const std::vector<int>& global_ranks,
                          const std::vector<detail::PeerState>& peers) {
  detail::PeerStates states;
  for (int r = 0; r < static_cast<int>(global_ranks.size()); ++r) {
    detail::PeerState p;
    p.rank = r;
    p.global_rank = global_ranks[static_cast<std::size_t>(r)];
    for (const auto& given : peers) {
      if (given.rank == r) p = given;
    }
    states.peers.push_back(p);
  }
  const auto d = detail::diagnose(op, rank, states);
  FailureRecord record;
  record.kind = kind;
  record.rank = global_ranks[static_cast<std::size_t>(rank)];
  record.op = detail::describe(op);
  record.seq = static_cast<std::int64_t>(op.seq);
  record.lost = d.lost;
  record.behind = d.behind;
  record.inside = d.inside;
  record.mismatched = d.mismatched;
  record.detail = d.text;
  record.message = "all_reduce timed out: " + d.text;
  return record;
}

detail::Op all_reduce(std::uint64_t seq) {
  detail::Op op;
  op.type = detail::OpType::AllReduce;
  op.seq = seq;
  op.input.count = op.output.count = 1;
  return op;
}

detail::PeerState at(int rank, int global_rank, std::uint64_t started, std::uint64_t finished, const detail::Op& last) {
  detail::PeerState p;
  p.rank = rank;
  p.global_rank = global_rank;
  p.progress = detail::ProgressRecord{.started = started, .finished = finished, .last = detail::fingerprint(last)};
  return p;
}

// Rank 0 of 2 timed out in all_reduce #39; rank 1 finished #38 and never started #39.
Records behind() {
  Records r;
  r.by_rank[0] = core_record(ErrorKind::Timeout, all_reduce(39), 0, {0, 1}, {at(1, 1, 39, 39, all_reduce(38))});
  return r;
}

TEST(Blame, ReadsTheRanksOfEveryDiagnosisOfTheCore) {
  EXPECT_EQ(ranks_waited_for(0, behind().lookup()), Ranks({1}));
  // Group ranks become global ranks: rank 1 of the group is global rank 7.
  Records sub;
  sub.by_rank[4] = core_record(ErrorKind::Timeout, all_reduce(4), 0, {4, 7, 9},
                               {at(1, 7, 3, 3, all_reduce(3)), at(2, 9, 5, 5, all_reduce(4))});
  EXPECT_EQ(ranks_waited_for(4, sub.lookup()), Ranks({7}));
  // Every rank reached the op; ranks 1 and 2 (global 6) are still inside it.
  Records inside;
  inside.by_rank[0] = core_record(ErrorKind::Timeout, all_reduce(3), 0, {0, 1, 6},
                                  {at(1, 1, 4, 3, all_reduce(3)), at(2, 6, 4, 3, all_reduce(3))});
  EXPECT_EQ(ranks_waited_for(0, inside.lookup()), Ranks({1, 6}));
  // Lost ranks come first, and the ranks behind are not named beside a loss (nor by the text).
  detail::PeerState gone = at(1, 1, 2, 2, all_reduce(1));
  gone.lost = "pid 5 on a";
  detail::PeerState gone_too = at(2, 4, 1, 1, all_reduce(0));
  gone_too.lost = "pid 6 on b";
  Records lost;
  lost.by_rank[0] =
      core_record(ErrorKind::PeerLost, all_reduce(2), 0, {0, 1, 4, 5}, {gone, gone_too, at(3, 5, 1, 1, all_reduce(0))});
  EXPECT_EQ(ranks_waited_for(0, lost.lookup()), Ranks({1, 4}));
  // A mismatch has no one culprit.
  Records mismatch;
  detail::Op other = all_reduce(2);
  other.input.count = other.output.count = 8;
  mismatch.by_rank[0] = core_record(ErrorKind::Mismatch, all_reduce(2), 0, {0, 1}, {at(1, 1, 3, 2, other)});
  EXPECT_EQ(mismatch.by_rank[0].mismatched, Ranks({1}));
  EXPECT_TRUE(ranks_waited_for(0, mismatch.lookup()).empty());
}

TEST(Blame, AFailureFirstElsewherePointsPastThatRank) {
  // Rank 0 failed because rank 2 failed first, and rank 2 waited for rank 3: rank 3 is the one.
  Records r;
  r.by_rank[0] = FailureRecord{.kind = ErrorKind::PeerLost, .rank = 0, .first = 2};
  r.by_rank[2] = FailureRecord{.kind = ErrorKind::Timeout, .rank = 2, .behind = {3}};
  EXPECT_EQ(ranks_waited_for(0, r.lookup()), Ranks({3}));
  // Rank 2 failed on its own (nobody named), or left no record: rank 2.
  r.by_rank[2].behind.clear();
  EXPECT_EQ(ranks_waited_for(0, r.lookup()), Ranks({2}));
  r.by_rank.erase(2);
  EXPECT_EQ(ranks_waited_for(0, r.lookup()), Ranks({2}));
}

TEST(Blame, WithoutARecordTheTextNamesNobody) {
  // What blame once parsed out of the text is no evidence now: only records are.
  const std::vector<std::string> lines = {
      "all_reduce #39 timed out: Ranks that had not reached all_reduce #39 (float32 x 1, SUM): rank 1: its last was "
      "all_reduce #38, finished.",
      "Lost rank 3 (pid 77 on node02: reset): its connection to the store closed without a goodbye"};
  const Records none;
  EXPECT_TRUE(ranks_waited_for(0, none.lookup()).empty());
  EXPECT_FALSE(find_root_cause(0, none.lookup(), lines, {}));
  EXPECT_FALSE(mentions_timeout("epoch 1 loss 0.3"));
  EXPECT_TRUE(mentions_timeout(lines[0]));
  EXPECT_TRUE(mentions_timeout("RuntimeError: [gloo] Timed out waiting 1800000ms for recv"));
  EXPECT_TRUE(mentions_timeout("group 'world': rank 0 of 2 did not join within 5.0 s."));
}

TEST(Blame, AStoppedRankTheRecordNamesIsTheRootCause) {
  const std::vector<SuspendedWorker> suspended = {{1, "suspended (state T in /proc/20930/stat)"}};
  const Records r = behind();
  auto culprit = find_root_cause(0, r.lookup(), {}, suspended);
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 1);
  for (const char* f : {"ddprun found rank 1 suspended (state T in /proc/20930/stat) when rank 0 failed",
                        "rank 0's error says it waited for rank 1", "Ranks that had not reached all_reduce #39"}) {
    EXPECT_NE(culprit->evidence.find(f), std::string::npos) << "missing '" << f << "' in: " << culprit->evidence;
  }
}

TEST(Blame, ARankStoppedBeforeItJoinedIsTheRootCause) {
  // Seen by bench/fault_trials.py: rank 0 stopped during init_process_group, rank 1 gave up joining.
  const std::vector<SuspendedWorker> suspended = {{0, "suspended (state T in /proc/31585/stat)"}};
  Records r;
  r.by_rank[1] = FailureRecord{.kind = ErrorKind::Timeout,
                               .rank = 1,
                               .group = "world",
                               .behind = {0},
                               .detail =
                                   "group 'world': rank 0 of 2 did not join within 5.0 s. They may not have "
                                   "been started"};
  auto culprit = find_root_cause(1, r.lookup(), {}, suspended);
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 0);
  for (const char* f : {"ddprun found rank 0 suspended", "rank 1's error says it waited for rank 0",
                        "group 'world': rank 0 of 2 did not join"}) {
    EXPECT_NE(culprit->evidence.find(f), std::string::npos) << "missing '" << f << "' in: " << culprit->evidence;
  }
}

TEST(Blame, TheRecordAloneNamesARankOfAnotherNode) {
  const Records r = behind();
  auto culprit = find_root_cause(0, r.lookup(), {}, {});
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 1);
  EXPECT_EQ(culprit->evidence.find("ddprun found"), std::string::npos) << culprit->evidence;
  EXPECT_NE(culprit->evidence.find("rank 0's error says it waited for rank 1"), std::string::npos) << culprit->evidence;
}

TEST(Blame, AStoppedRankExplainsATimeoutThatNamesNobody) {
  // A PyTorch program's error: no record, but a timeout while rank 1 was stopped.
  const std::vector<SuspendedWorker> suspended = {{1, "suspended (state T in /proc/5/stat)"}};
  const Records none;
  auto culprit = find_root_cause(0, none.lookup(),
                                 {"RuntimeError: [gloo] Timed out waiting 1800000ms for recv operation"}, suspended);
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 1);
  EXPECT_NE(culprit->evidence.find("failed with a timeout (its error names no rank it waited for)"), std::string::npos);
  // A record of a timeout that names nobody says the same without any line.
  Records timeout;
  timeout.by_rank[0] = FailureRecord{.kind = ErrorKind::Timeout, .rank = 0};
  culprit = find_root_cause(0, timeout.lookup(), {}, suspended);
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 1);
  // Not a timeout: a failure of its own, whatever else is stopped.
  EXPECT_FALSE(find_root_cause(0, none.lookup(), {"loss is nan"}, suspended));
  // Nothing stopped, nobody named: the first failure is the root cause.
  EXPECT_FALSE(find_root_cause(0, none.lookup(), {"RuntimeError: Timed out"}, {}));
  // The failed rank naming itself (or only itself) is no evidence.
  Records self;
  self.by_rank[1] = FailureRecord{.kind = ErrorKind::Timeout, .rank = 1, .behind = {1}};
  EXPECT_FALSE(find_root_cause(1, self.lookup(), {}, {}));
}

// Every letter of `text` moved on by 13, digits kept: the same facts in other words.
std::string reworded(std::string text) {
  for (char& c : text) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>('a' + (c - 'a' + 13) % 26);
    if (c >= 'A' && c <= 'Z') c = static_cast<char>('A' + (c - 'A' + 13) % 26);
  }
  return text;
}

TEST(Blame, RewordingEveryMessageChangesNoBlame) {
  const std::vector<SuspendedWorker> stopped = {{2, "suspended (state T in /proc/7/stat)"}};
  std::vector<Records> cases = {behind()};
  Records chain;
  chain.by_rank[0] = FailureRecord{.kind = ErrorKind::PeerLost,
                                   .rank = 0,
                                   .first = 3,
                                   .detail = "Rank 3 failed first: ...",
                                   .message = "broadcast #5 failed"};
  chain.by_rank[3] =
      core_record(ErrorKind::Timeout, all_reduce(5), 3, {0, 1, 2, 3},
                  {at(0, 0, 6, 5, all_reduce(5)), at(1, 1, 6, 5, all_reduce(5)), at(2, 2, 5, 5, all_reduce(4))});
  cases.push_back(chain);
  Records joined;
  joined.by_rank[0] = FailureRecord{.kind = ErrorKind::Timeout,
                                    .rank = 0,
                                    .group = "world",
                                    .behind = {2},
                                    .detail = "group 'world': rank 2 of 3 did not join within 5.0 s"};
  cases.push_back(joined);
  for (const Records& original : cases) {
    Records other = original;
    for (auto& [rank, record] : other.by_rank) {
      record.op = reworded(record.op);
      record.detail = reworded(record.detail);
      record.message = reworded(record.message);
      record.group = reworded(record.group);
    }
    ASSERT_NE(other.by_rank.begin()->second.detail, original.by_rank.begin()->second.detail);
    for (const auto& suspended : {std::vector<SuspendedWorker>{}, stopped}) {
      const auto a = find_root_cause(0, original.lookup(), {}, suspended);
      const auto b = find_root_cause(0, other.lookup(), {}, suspended);
      ASSERT_TRUE(a) << original.by_rank.begin()->second.detail;
      ASSERT_TRUE(b);
      EXPECT_EQ(a->rank, b->rank) << original.by_rank.begin()->second.detail;
      EXPECT_EQ(ranks_waited_for(0, original.lookup()), ranks_waited_for(0, other.lookup()));
    }
  }
}

TEST(Blame, ProcessStates) {
  EXPECT_EQ(stat_state("123 (worker) T 1 2 3"), 'T');
  EXPECT_EQ(stat_state("123 (a (b) c) t 1"), 't') << "the command may hold parentheses and spaces";
  EXPECT_EQ(stat_state("123 (x)"), 0);
  EXPECT_EQ(stat_state(""), 0);
  EXPECT_FALSE(stopped_state(::getpid())) << "this test is running";
  EXPECT_FALSE(stopped_state(0x3fffffff)) << "no such process";
}

}  // namespace
}  // namespace ddp::launcher
