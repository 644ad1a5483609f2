// A worker stopped (SIGSTOP) after the rest of the job has exited: nothing else would ever end
// the job, so ddprun says so at once and ends it after --stopped_timeout. The rule and its clock
// directly, then the real ddprun on one node and on two.
#include <signal.h>

#include "e2e.h"
#include "workers/stopped_alone.h"

namespace ddp::launcher::test {
namespace {

using Clock = std::chrono::steady_clock;

TEST(StoppedAlone, OnlyWhenEveryRunningWorkerIsStoppedAndTheRestExited) {
  EXPECT_TRUE(stopped_alone(1, 1, true, 2));    // the other of two exited
  EXPECT_TRUE(stopped_alone(2, 2, true, 8));    // two stopped, six exited (here or elsewhere)
  EXPECT_FALSE(stopped_alone(2, 1, true, 2));   // one still runs: it will time out on the stopped one
  EXPECT_FALSE(stopped_alone(2, 2, true, 2));   // every worker stopped, none exited: a paused job
  EXPECT_FALSE(stopped_alone(1, 1, true, 1));   // a job of one: a pause
  EXPECT_FALSE(stopped_alone(1, 1, false, 4));  // another node's workers still run
  EXPECT_FALSE(stopped_alone(0, 0, true, 2));   // nothing runs
}

TEST(StoppedAlone, TheClockSaysWhenItBeganEndedAndExpiredOnce) {
  using Change = StoppedAloneClock::Change;
  StoppedAloneClock clock(std::chrono::milliseconds(1000));
  const auto t0 = Clock::now();
  EXPECT_EQ(clock.observe(false, t0), Change::None);
  EXPECT_EQ(clock.observe(true, t0), Change::Began);
  EXPECT_EQ(clock.observe(true, t0 + 999ms), Change::None);
  EXPECT_EQ(clock.observe(true, t0 + 1000ms), Change::Expired);
  EXPECT_EQ(clock.observe(true, t0 + 2000ms), Change::None);  // once
  EXPECT_EQ(clock.observe(false, t0 + 2100ms), Change::Ended);
  EXPECT_EQ(clock.observe(false, t0 + 2200ms), Change::None);
  // A new stretch counts from its own start.
  EXPECT_EQ(clock.observe(true, t0 + 3000ms), Change::Began);
  EXPECT_EQ(clock.observe(true, t0 + 3500ms), Change::None);
  EXPECT_EQ(clock.observe(true, t0 + 4000ms), Change::Expired);
}

// Rank 0 exits 0 at once; rank 1 sleeps until SIGTERM. Returns rank 1's pid once it sleeps.
pid_t stop_rank_1_after_rank_0_exited(Launch& run, const TempDir& dir) {
  EXPECT_TRUE(run.wait_for("[0]:rank 0 exiting")) << run.all();
  EXPECT_TRUE(run.wait_for("[1]:rank 1 sleeping")) << run.all();
  const auto pids = pids_in(dir, "worker", 2);
  EXPECT_EQ(pids.size(), 2u);
  if (pids.size() != 2) return -1;
  EXPECT_TRUE(all_gone({pids[0]})) << "rank 0 did not exit";
  ::kill(pids[1], SIGSTOP);
  return pids[1];
}

const std::vector<std::string> kRank0ExitsRank1Sleeps = {"--exit-rank", "0", "--then", "sleep"};

TEST(StoppedWorker, IsNamedAtOnceAndEndedAsAFailureAfterTheBound) {
  TempDir dir;
  auto worker = kRank0ExitsRank1Sleeps;
  worker.insert(worker.begin(), {"--pid-dir", dir.path()});
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--stopped_timeout=2"}, worker));
  const pid_t pid = stop_rank_1_after_rank_0_exited(run, dir);
  ASSERT_GT(pid, 0);
  const std::string p = std::to_string(pid);
  const std::string state = "suspended (state T in /proc/" + p + "/stat)";
  const auto stopped = Clock::now();
  ASSERT_TRUE(run.wait_for("ddprun: rank 1 (pid " + p + ") is " + state, 5s)) << run.all();
  EXPECT_LT(Clock::now() - stopped, 2s) << "not said at once";
  ASSERT_TRUE(run.wait(30s));
  EXPECT_GE(Clock::now() - stopped, 2s) << "ended before the bound";
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  expect_contains(run.err(),
                  {", and every other worker of the job has exited: no collective is left to time out on it and "
                   "nothing will continue it. Continue it to let it finish (kill -CONT " +
                       p + "); otherwise ddprun ends it as a failure in 2.0 s (--stopped_timeout).",
                   "ddprun: the job failed on attempt 1 of 1",
                   "Root cause: rank 1 stayed " + state + " for 2.0 s after every other worker of the job had exited",
                   "so ddprun ended it (SIGCONT and SIGTERM, then SIGKILL after --grace_period) as a failure "
                   "(--stopped_timeout=2.0 s)",
                   "  rank       : 1 (local rank 1 on node 0)\n", "  pid        : " + p + "\n", "[1]: rank 1 sleeping",
                   "rank 0 (local rank 0, pid ", "): exited 0",
                   "rank 1 (local rank 1, pid " + p + "): stopped by ddprun (exit code 0); it had been " + state +
                       " when the attempt ended  <- root cause"},
                  run.all());
  // Continued before SIGTERM: it acted on it.
  expect_contains(run.out(), {"[1]:rank 1 got SIGTERM"}, run.all());
  EXPECT_TRUE(all_gone({pid}));
}

TEST(StoppedWorker, ContinuedInTimeItFinishesAndTheJobSucceeds) {
  TempDir dir;
  auto worker = kRank0ExitsRank1Sleeps;
  worker.insert(worker.begin(), {"--pid-dir", dir.path()});
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--stopped_timeout=30"}, worker));
  const pid_t pid = stop_rank_1_after_rank_0_exited(run, dir);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(run.wait_for("every other worker of the job has exited", 5s)) << run.all();
  ::kill(pid, SIGCONT);
  ASSERT_TRUE(run.wait_for("ddprun: the stopped worker runs again: waiting for it to finish", 5s)) << run.all();
  ::kill(pid, SIGTERM);  // the worker's own way to finish: it exits 0
  ASSERT_TRUE(run.wait(30s));
  EXPECT_EQ(run.exit_code(), 0) << run.all();
  EXPECT_EQ(run.err().find("failed"), std::string::npos) << run.all();
}

TEST(StoppedWorker, OnTwoNodesTheNodeHoldingItEndsItOnceTheOtherNodeIsDone) {
  // One worker per node: node 0's exits 0, node 1's is stopped.
  TempDir dir;
  const int port = free_port();
  auto node = [&](int rank) {
    auto worker = kRank0ExitsRank1Sleeps;
    worker.insert(worker.begin(), {"--pid-dir", dir.path()});
    return ddprun_worker(
        {"--nnodes=2", "--node_rank=" + std::to_string(rank), "--nproc_per_node=1",
         "--master_port=" + std::to_string(port), "--rdzv_conf=join_timeout=20", "--stopped_timeout=1"},
        worker);
  };
  Launch node0(node(0));
  Launch node1(node(1));
  ASSERT_TRUE(node0.wait_for("[0]:rank 0 exiting")) << node0.all();
  ASSERT_TRUE(node1.wait_for("[1]:rank 1 sleeping")) << node1.all();
  const auto pids = pids_in(dir, "worker", 2);
  ASSERT_EQ(pids.size(), 2u);
  ::kill(pids[1], SIGSTOP);
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 30s));
  const std::string p = std::to_string(pids[1]);
  for (Launch* n : {&node0, &node1}) {
    EXPECT_EQ(n->exit_code(), 1) << n->all();
    expect_contains(n->err(),
                    {"Root cause: rank 1 stayed suspended (state T in /proc/" + p + "/stat) for 1.0 s",
                     "  rank       : 1 (local rank 0 on node 1)\n"},
                    n->all());
  }
  expect_contains(node1.err(), {"ddprun: rank 1 (pid " + p + ") is suspended", "<- root cause"}, node1.all());
  EXPECT_TRUE(all_gone({pids[1]}));
}

}  // namespace
}  // namespace ddp::launcher::test
