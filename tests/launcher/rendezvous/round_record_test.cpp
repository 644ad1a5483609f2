// The pure parts of elastic jobs: when a round closes, the round record the nodes share and the
// lines printed about it, and when a node's heartbeat counts as stopped; and the heartbeat itself.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "rendezvous/attempt_end.h"
#include "ddp/error.h"
#include "ddp/hash_store.h"
#include "rendezvous/elastic_rendezvous.h"
#include "rendezvous/heartbeat.h"
#include "rendezvous/round_record.h"

namespace ddp::launcher {
namespace {

using namespace std::chrono_literals;

RoundDecision decide(int joined, int pending, std::chrono::milliseconds since_arrival,
                     std::chrono::milliseconds elapsed) {
  // --nnodes=2:4, last_call_timeout 30 s, join_timeout 600 s.
  return decide_round(joined, pending, 2, 4, since_arrival, elapsed, 30s, 600s);
}

TEST(RoundDecision, ClosesAtMaxAtOnce) {
  EXPECT_EQ(decide(4, 0, 0ms, 0ms), RoundDecision::Close);
  EXPECT_EQ(decide(4, 1, 0ms, 0ms), RoundDecision::Close);  // full: a slow node waits for the next round
}

TEST(RoundDecision, AtMinItWaitsForTheLastCallAndForTheNodesOfTheLastRound) {
  EXPECT_EQ(decide(2, 0, 29s, 40s), RoundDecision::Wait);   // a third may still come
  EXPECT_EQ(decide(2, 0, 30s, 40s), RoundDecision::Close);  // none came for last_call_timeout
  EXPECT_EQ(decide(3, 0, 30s, 40s), RoundDecision::Close);
  // A node of the last round that is alive but still stopping its workers is waited for.
  EXPECT_EQ(decide(2, 1, 100s, 200s), RoundDecision::Wait);
  EXPECT_EQ(decide(1, 0, 100s, 200s), RoundDecision::Wait);  // below MIN: wait for more
}

TEST(RoundDecision, AtTheJoinTimeoutItClosesWithMinOrFails) {
  EXPECT_EQ(decide(2, 1, 0ms, 600s), RoundDecision::Close);  // the slow one is left out
  EXPECT_EQ(decide(1, 0, 0ms, 600s), RoundDecision::Fail);
  EXPECT_EQ(decide(0, 0, 0ms, 600s), RoundDecision::Fail);
}

RoundRecord sample_record() {
  RoundRecord r;
  r.round = 2;
  r.restarts_used = 1;
  r.nodes = {{2, "nodeA", 100, 0}, {1, "node B\nodd", 101, 3}};
  MembershipChange lost;
  lost.kind = MembershipChange::Kind::Lost;
  lost.agent = 2;
  lost.node_rank = 2;
  lost.host = "nodeC";
  lost.pid = 4242;
  lost.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
  lost.why = "its ddprun vanished (pid 4242 on nodeC): its connection ... closed\twith a tab";
  lost.nnodes = 2;
  lost.workers = 3;
  r.changes.push_back(lost);
  MembershipChange joined = lost;
  joined.kind = MembershipChange::Kind::Joined;
  joined.agent = 3;
  joined.node_rank = 1;
  joined.why.clear();
  r.changes.push_back(joined);
  return r;
}

TEST(RoundRecord, RoundTripsThroughText) {
  const RoundRecord r = sample_record();
  const RoundRecord back = decode_round_record(encode(r));
  EXPECT_EQ(back.round, 2);
  EXPECT_TRUE(back.formed);
  EXPECT_EQ(back.restarts_used, 1);
  ASSERT_EQ(back.nodes.size(), 2u);
  EXPECT_EQ(back.nodes[1].agent, 3);
  EXPECT_EQ(back.nodes[1].nproc, 1);
  EXPECT_EQ(back.nodes[1].host, "node B\nodd");
  EXPECT_EQ(back.nodes[1].pid, 101);
  EXPECT_EQ(back.world_size(), 3);
  EXPECT_EQ(back.node_rank_of(3), 1);
  EXPECT_EQ(back.node_rank_of(0), 0);
  EXPECT_EQ(back.node_rank_of(7), -1);
  ASSERT_EQ(back.changes.size(), 2u);
  EXPECT_EQ(back.changes[0].kind, MembershipChange::Kind::Lost);
  EXPECT_EQ(back.changes[0].why, r.changes[0].why);
  EXPECT_EQ(back.changes[0].time, r.changes[0].time);
  EXPECT_EQ(back.changes[0].host, "nodeC");
  EXPECT_EQ(back.changes[1].kind, MembershipChange::Kind::Joined);
  EXPECT_EQ(back.changes[1].agent, 3);

  RoundRecord failed;
  failed.round = 1;
  failed.formed = false;
  failed.failure = "only 1 of the at least 2 nodes ...";
  const RoundRecord failed_back = decode_round_record(encode(failed));
  EXPECT_FALSE(failed_back.formed);
  EXPECT_EQ(failed_back.failure, failed.failure);
  EXPECT_TRUE(failed_back.nodes.empty());
}

TEST(RoundRecord, RejectsForeignText) {
  EXPECT_THROW(decode_round_record("hello"), Error);
  EXPECT_THROW(decode_round_record("ddprun-round 1\nround=x\n"), Error);
  EXPECT_THROW(decode_round_record("ddprun-round 1\nnode=1 0 5 h\n"), Error);  // no workers
  EXPECT_THROW(decode_round_record("ddprun-round 1\nchange=moved 1 1 1 1 1 1 h\twhy\n"), Error);
  EXPECT_THROW(decode_round_record("ddprun-round 1\nchange=lost 1 1\n"), Error);
  EXPECT_THROW(decode_round_record("ddprun-round 1\nmystery=1\n"), Error);
}

TEST(RoundRecord, EachChangeIsOneLine) {
  const RoundRecord r = sample_record();
  EXPECT_EQ(describe(r.changes[0]),
            "node 2 (host nodeC, pid 4242) lost: its ddprun vanished (pid 4242 on nodeC): its connection ... "
            "closed\twith a tab; continuing with 2 nodes, 3 workers");
  EXPECT_EQ(describe(r.changes[1]), "node 1 (host nodeC, pid 4242) joined; continuing with 2 nodes, 3 workers");
  MembershipChange last = r.changes[0];
  last.nnodes = 0;  // in a round that could not form
  EXPECT_EQ(describe(last).find("continuing"), std::string::npos);
  last.nnodes = 1;
  last.workers = 1;
  EXPECT_NE(describe(last).find("continuing with 1 node, 1 worker"), std::string::npos);
  const std::string line = history_line(r.changes[0]);
  EXPECT_EQ(line.substr(0, 2), "20") << line;  // the date first
  EXPECT_NE(line.find("  node 2 (host nodeC"), std::string::npos) << line;
}

TEST(AttemptEnd, ALostNodeAndAWaitingNodeTravel) {
  AttemptEnd lost;
  lost.kind = AttemptEnd::Kind::AgentLost;
  lost.lost_agent = 5;
  lost.lost_why = "its ddprun went silent: no heartbeat for 15.0 s";
  lost.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'500));
  const AttemptEnd back = decode_attempt_end(encode(lost));
  EXPECT_EQ(back.lost_agent, 5);
  EXPECT_EQ(back.lost_why, lost.lost_why);
  EXPECT_EQ(back.time, lost.time);
  EXPECT_FALSE(back.restartable()) << "a static job ends";
  EXPECT_TRUE(back.restartable(/*elastic=*/true)) << "an elastic one goes on without it";

  AttemptEnd waiting;
  waiting.kind = AttemptEnd::Kind::NodeWaiting;
  waiting.what = "a node (host h4) is waiting to join";
  const AttemptEnd waiting_back = decode_attempt_end(encode(waiting));
  EXPECT_EQ(waiting_back.kind, AttemptEnd::Kind::NodeWaiting);
  EXPECT_EQ(waiting_back.what, waiting.what);
  EXPECT_FALSE(waiting_back.restartable(true)) << "a membership change uses no restart";
}

TEST(BeatWatch, ANodeIsSilentOnceItsCounterStoodStillForTheLimit) {
  BeatWatch watch(1500ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(watch.silent(1, 7, t0));
  EXPECT_FALSE(watch.silent(1, 7, t0 + 1499ms));
  EXPECT_EQ(watch.silent(1, 7, t0 + 1500ms), 1500ms);
  EXPECT_FALSE(watch.silent(1, 8, t0 + 1600ms)) << "it beat again";
  EXPECT_FALSE(watch.silent(1, 8, t0 + 3000ms));
  EXPECT_EQ(watch.silent(1, 8, t0 + 3200ms), 1600ms);
  EXPECT_FALSE(watch.silent(2, 0, t0 + 3200ms)) << "each node on its own";
}

// A store whose add fails while `failing` is set, as a reset connection or a moment's outage would.
class FlakyStore : public HashStore {
 public:
  std::atomic<bool> failing{false};
  std::atomic<int> clones{0};
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    if (failing) throw IOError("store: connection reset by peer");
    return HashStore::add(key, delta);
  }
  std::shared_ptr<Store> clone() override {
    ++clones;
    return HashStore::clone();  // the same data: the "new connection"
  }
};

TEST(Heartbeat, ABeatThatFailsIsTriedAgainOnANewConnectionUntilTheLimit) {
  auto store = std::make_shared<FlakyStore>();
  {
    Heartbeat beat(store, "beat", 20ms, 600ms);
    std::this_thread::sleep_for(100ms);
    store->failing = true;
    std::this_thread::sleep_for(200ms);  // a third of the limit without a beat
    EXPECT_FALSE(beat.failure()) << *beat.failure();
    EXPECT_GE(store->clones.load(), 1) << "a failed beat is tried again on a new connection";
    store->failing = false;
    const auto before = store->add("beat", 0);
    std::this_thread::sleep_for(100ms);
    EXPECT_GT(store->add("beat", 0), before) << "the beats go on";
    store->failing = true;
    for (int i = 0; i < 200 && !beat.failure(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(beat.failure()) << "no beat for the limit is a failure";
    EXPECT_NE(beat.failure()->find("connection reset by peer"), std::string::npos) << *beat.failure();
    EXPECT_NE(beat.failure()->find("no heartbeat got through for"), std::string::npos) << *beat.failure();
  }
}

}  // namespace
}  // namespace ddp::launcher
