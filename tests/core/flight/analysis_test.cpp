// The analysis of the ranks' dumps, on dumps made by hand: each way of parting ways is named with
// the right rank and sequence number, and what is fine is not blamed.
#include "records/flight_analysis.h"

#include <gtest/gtest.h>

#include "util/strings.h"

namespace ddp::detail {
namespace {

using Kind = FlightFinding::Kind;
constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kT0 = 1'764'000'000'000'000'000;

FlightEntry call(std::uint64_t seq, FlightState state = FlightState::Finished, std::int64_t started = 0,
                 OpType op = OpType::AllReduce, std::uint32_t group = 0) {
  FlightEntry e;
  e.group = group;
  e.seq = seq;
  e.op = op;
  e.count = e.out_count = 10;
  if (op == OpType::AllReduce) e.reduce = ReduceOp::SUM;
  if (op == OpType::Broadcast) e.root = 0;
  e.state = state;
  e.issued_ns = kT0 + static_cast<std::int64_t>(seq) * 100 * kMs;
  e.started_ns = state == FlightState::Issued ? 0 : (started ? started : e.issued_ns);
  e.ended_ns = state == FlightState::Finished || state == FlightState::Failed ? e.started_ns + kMs : 0;
  return e;
}

// Rank `rank` of a world of `world`, which finished collectives 0 to done - 1, then `then`.
FlightDump dump(int rank, int world, std::uint64_t done, std::vector<FlightEntry> then = {}) {
  FlightDump d;
  d.rank = rank;
  d.pid = 100 + rank;
  d.host = "h";
  d.time_ns = kT0 + 10'000 * kMs + rank;
  d.reason = cat("rank ", rank, " failed");
  d.capacity = 2048;
  FlightGroup g{"world", rank, world, {}};
  for (int r = 0; r < world; ++r) g.global_ranks.push_back(r);
  d.groups.push_back(g);
  for (std::uint64_t s = 0; s < done; ++s) d.entries.push_back(call(s));
  for (auto& e : then) d.entries.push_back(e);
  d.recorded = d.entries.size();
  return d;
}

std::string text(const FlightReport& r) { return join(r.lines, "\n"); }

void expect_finding(const FlightReport& r, Kind kind, std::uint64_t seq, std::vector<int> ranks) {
  EXPECT_EQ(static_cast<int>(r.finding.kind), static_cast<int>(kind)) << text(r);
  EXPECT_EQ(r.finding.seq, seq) << text(r);
  EXPECT_EQ(r.finding.ranks, ranks) << text(r);
}

void expect_lines(const FlightReport& r, std::initializer_list<std::string> fragments) {
  for (const auto& f : fragments)
    EXPECT_NE(text(r).find(f), std::string::npos) << "missing '" << f << "' in:\n" << text(r);
}

TEST(FlightAnalysis, RanksThatAgreeAreNotBlamed) {
  const auto r = analyze({dump(0, 3, 5), dump(1, 3, 5), dump(2, 3, 5)});
  expect_finding(r, Kind::None, 0, {});
  expect_lines(r,
               {"dumps from 3 of 3 ranks", "first dump: rank 0 (pid 100 on h): rank 0 failed", "=> the ranks agree"});
}

TEST(FlightAnalysis, ARankThatCalledADifferentCollectiveIsNamed) {
  const auto r = analyze({dump(0, 3, 1, {call(1, FlightState::Failed)}), dump(1, 3, 1, {call(1, FlightState::Failed)}),
                          dump(2, 3, 1, {call(1, FlightState::Failed, 0, OpType::Broadcast)})});
  expect_finding(r, Kind::Mismatch, 1, {2});
  expect_lines(
      r, {"group 'world' (3 ranks): the ranks called different collectives at sequence number 1",
          "ranks 0, 1 called all_reduce #1 (float32 x 10, SUM)", "rank 2 called broadcast #1 (float32 x 10, root 0)",
          "=> rank 2 at sequence number 1 of group 'world': called a different collective"});
  // Two ranks: no majority, both are named.
  const auto two = analyze({dump(0, 2, 4, {call(4, FlightState::Started)}),
                            dump(1, 2, 4, {call(4, FlightState::Started, 0, OpType::Barrier)})});
  expect_finding(two, Kind::Mismatch, 4, {0, 1});
  expect_lines(two, {"rank 1 called barrier #4"});
}

TEST(FlightAnalysis, ARankThatNeverCalledTheCollectiveIsNamedWithItsLast) {
  const auto r = analyze(
      {dump(0, 3, 2, {call(2, FlightState::Failed)}), dump(1, 3, 2), dump(2, 3, 2, {call(2, FlightState::Failed)})});
  expect_finding(r, Kind::NotReached, 2, {1});
  expect_lines(r, {"ranks 0, 2 called all_reduce #2 (float32 x 10, SUM); rank 1 never did",
                   "rank 1: its last was all_reduce #1 (float32 x 10, SUM), finished",
                   "=> rank 1 at sequence number 2 of group 'world': never called it"});
}

TEST(FlightAnalysis, ARankWithoutADumpIsNamedWhereTheOthersWaited) {
  const auto r =
      analyze({dump(0, 3, 6, {call(6, FlightState::Failed)}), dump(1, 3, 6, {call(6, FlightState::Failed)})});
  expect_finding(r, Kind::NoDump, 6, {2});
  expect_lines(r, {"dumps from 2 of 3 ranks; none from rank 2",
                   "ranks 0, 1 waited at all_reduce #6 (float32 x 10, SUM), which never finished; every collective "
                   "before it finished (the last: #5)",
                   "rank 2 left no dump: killed, or stopped before it could write one",
                   "=> rank 2 at sequence number 6 of group 'world': missing (no dump)"});
  // The others finished everything they called: the missing rank is named after the last of it.
  const auto done = analyze({dump(0, 3, 6), dump(1, 3, 6)});
  expect_finding(done, Kind::NoDump, 6, {2});
  expect_lines(done, {"the others finished every collective they recorded, up to #5"});
}

// In a device-keyed group the findings say which backend the op went to (a CUDA all_reduce over
// nccl stuck behind CPU collectives over gloo that finished).
TEST(FlightAnalysis, InAKeyedGroupTheBackendOfTheOpIsNamed) {
  auto keyed = [](int rank, std::vector<FlightEntry> then) {
    FlightDump d = dump(rank, 2, 3, std::move(then));
    d.groups[0].backend = "cpu:gloo,cuda:nccl";
    for (auto& e : d.entries) e.backend = e.backend.empty() ? "gloo" : e.backend;
    return d;
  };
  FlightEntry stuck = call(3, FlightState::Failed);
  stuck.backend = "nccl";
  const auto r = analyze({keyed(0, {stuck}), keyed(1, {})});
  expect_finding(r, Kind::NotReached, 3, {1});
  expect_lines(r, {"group 'world' (2 ranks; cpu:gloo,cuda:nccl): rank 0 called all_reduce #3 (float32 x 10, SUM) "
                   "over nccl; rank 1 never did",
                   "rank 1: its last was all_reduce #2 (float32 x 10, SUM) over gloo, finished"});
  // A group of one backend says nothing more than before.
  FlightDump plain = dump(0, 2, 3, {call(3, FlightState::Failed)});
  plain.groups[0].backend = "gloo";
  for (auto& e : plain.entries) e.backend = "gloo";
  expect_lines(analyze({plain, dump(1, 2, 3)}), {"group 'world' (2 ranks): rank 0 called all_reduce #3 (float32 x 10, "
                                                 "SUM); rank 1 never did"});
}

TEST(FlightAnalysis, RanksOnOtherNodesAreNotBlamedForHavingNoDumpHere) {
  const auto r =
      analyze({dump(0, 4, 3, {call(3, FlightState::Failed)}), dump(1, 4, 3, {call(3, FlightState::Failed)})}, {2, 3});
  expect_finding(r, Kind::Stuck, 3, {2, 3});
  expect_lines(
      r, {"dumps from 2 of 4 ranks; ranks 2, 3 ran on other nodes", "the dumps of ranks 2, 3 are on their own nodes"});
}

TEST(FlightAnalysis, WhenEveryRankArrivedTheLastToArriveIsNamed) {
  const auto r = analyze({dump(0, 3, 3, {call(3, FlightState::Failed, kT0 + 1000 * kMs)}),
                          dump(1, 3, 3, {call(3, FlightState::Failed, kT0 + 3000 * kMs)}),
                          dump(2, 3, 3, {call(3, FlightState::Failed, kT0 + 1100 * kMs)})});
  expect_finding(r, Kind::Stuck, 3, {1});
  expect_lines(r, {"every rank reached all_reduce #3 (float32 x 10, SUM) and it did not finish",
                   "the last to arrive was rank 1, 2.0 s after the first"});
}

TEST(FlightAnalysis, ARankThatIsUsuallyLastToArriveIsReported) {
  std::vector<FlightDump> dumps;
  for (int rank = 0; rank < 4; ++rank) {
    std::vector<FlightEntry> calls;
    for (std::uint64_t s = 0; s < 10; ++s) {
      const std::int64_t start = kT0 + static_cast<std::int64_t>(s) * 100 * kMs + (rank == 3 ? 5 * kMs : rank * 10'000);
      calls.push_back(call(s, FlightState::Finished, start));
    }
    dumps.push_back(dump(rank, 4, 0, calls));
  }
  const auto r = analyze(dumps);
  expect_finding(r, Kind::None, 0, {});
  expect_lines(r,
               {"slowest to arrive in group 'world': rank 3, the last at 10 of 10 collectives, a median 5.0 ms after "
                "the first"});
  // Within a millisecond: noise, not a straggler.
  for (auto& d : dumps) {
    for (auto& e : d.entries) e.started_ns = e.issued_ns + (d.rank == 3 ? 500'000 : 0);
  }
  EXPECT_EQ(text(analyze(dumps)).find("slowest"), std::string::npos) << text(analyze(dumps));
}

TEST(FlightAnalysis, EntriesDroppedFromARingAreNotMistakenForMissingCalls) {
  FlightDump small = dump(0, 2, 0);
  for (std::uint64_t s = 50; s < 60; ++s) small.entries.push_back(call(s));
  small.capacity = 10;
  small.recorded = 60;
  auto r = analyze({small, dump(1, 2, 60)});
  expect_finding(r, Kind::None, 0, {});
  // ... but what the small ring holds is still compared.
  small.entries.back() = call(59, FlightState::Started, 0, OpType::AllGather);
  r = analyze({small, dump(1, 2, 60)});
  expect_finding(r, Kind::Mismatch, 59, {0, 1});
}

TEST(FlightAnalysis, AProblemInASubgroupIsNamedInThatGroupsTerms) {
  auto with_sub = [](int rank, std::vector<FlightEntry> sub) {
    FlightDump d = dump(rank, 3, 4);
    if (rank > 0) d.groups.push_back({"pairs", rank - 1, 2, {1, 2}});
    for (auto& e : sub) {
      e.group = 1;
      d.entries.push_back(e);
    }
    d.recorded = d.entries.size();
    return d;
  };
  const auto r =
      analyze({with_sub(0, {}), with_sub(1, {call(0), call(1, FlightState::Started)}), with_sub(2, {call(0)})});
  expect_finding(r, Kind::NotReached, 1, {2});
  EXPECT_EQ(r.finding.group, "pairs");
  expect_lines(r, {"group 'pairs' (2 ranks): rank 1 called all_reduce #1", "rank 2 never did"});
}

TEST(FlightAnalysis, NoDumpsSaySo) { EXPECT_EQ(text(analyze({})), "no flight recorder dumps to read"); }

}  // namespace
}  // namespace ddp::detail
