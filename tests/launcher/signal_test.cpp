// SIGINT and SIGTERM to ddprun reach every worker; after ddprun exits, however it exits, no
// worker (nor a worker's own child) is left running.
#include <signal.h>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

using Clock = std::chrono::steady_clock;

void expect_signal_reaches_every_worker(int sig, const std::string& name) {
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=3", port_flag()},
                           {"--pid-dir", dir.path(), "--spawn-child", "--then", "sleep"}));
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(run.wait_for("[" + std::to_string(rank) + "]:rank " + std::to_string(rank) + " sleeping")) << run.all();
  }
  run.signal(sig);
  ASSERT_TRUE(run.wait(30s));
  EXPECT_EQ(run.exit_code(), 128 + sig) << run.all();
  for (int rank = 0; rank < 3; ++rank) {
    expect_contains(run.out(), {"[" + std::to_string(rank) + "]:rank " + std::to_string(rank) + " got " + name}, run.all());
  }
  expect_contains(run.err(), {"received " + name + " and stopped the job"}, run.all());
  EXPECT_TRUE(all_gone(pids_in(dir, "worker", 3)));
  EXPECT_TRUE(all_gone(pids_in(dir, "child", 3))) << "a worker's own child outlived the job";
}

TEST(Signals, SigtermReachesEveryWorker) { expect_signal_reaches_every_worker(SIGTERM, "SIGTERM"); }

TEST(Signals, SigintReachesEveryWorker) { expect_signal_reaches_every_worker(SIGINT, "SIGINT"); }

TEST(Signals, ASecondSigintKillsAtOnce) {
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--grace_period=60"},
                           {"--pid-dir", dir.path(), "--then", "hang"}));
  ASSERT_TRUE(run.wait_for("[0]:rank 0 hanging")) << run.all();
  ASSERT_TRUE(run.wait_for("[1]:rank 1 hanging")) << run.all();
  const auto start = Clock::now();
  run.signal(SIGINT);
  ::usleep(300000);
  run.signal(SIGINT);
  ASSERT_TRUE(run.wait(30s));
  EXPECT_LT(Clock::now() - start, 10s) << "the second SIGINT did not cut the 60 s grace period short";
  EXPECT_EQ(run.exit_code(), 128 + SIGINT) << run.all();
  expect_contains(run.err(), {"stopped by ddprun (signal SIGKILL (9))"}, run.all());
  EXPECT_TRUE(all_gone(pids_in(dir, "worker", 2)));
}

TEST(Signals, SigkillLeavesNoWorkerNorChildBehind) {
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag()},
                           {"--pid-dir", dir.path(), "--spawn-child", "--then", "sleep"}));
  ASSERT_TRUE(run.wait_for("[0]:rank 0 sleeping")) << run.all();
  ASSERT_TRUE(run.wait_for("[1]:rank 1 sleeping")) << run.all();
  const auto workers = pids_in(dir, "worker", 2);
  const auto children = pids_in(dir, "child", 2);
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_EQ(children.size(), 2u);
  ::kill(run.pid(), SIGKILL);  // ddprun alone: it cannot catch this
  EXPECT_TRUE(all_gone(workers)) << "workers outlived ddprun (PR_SET_PDEATHSIG)";
  EXPECT_TRUE(all_gone(children)) << "a worker's child outlived ddprun (the orphan guard)";
  ASSERT_TRUE(run.wait(10s));
  EXPECT_EQ(run.term_signal(), SIGKILL);
}

TEST(Signals, ChildrenLeftBehindBySuccessfulWorkersAreStopped) {
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag()}, {"--pid-dir", dir.path(), "--spawn-child"}));
  ASSERT_TRUE(run.wait());
  EXPECT_EQ(run.exit_code(), 0) << run.all();
  const auto children = pids_in(dir, "child", 2);
  ASSERT_EQ(children.size(), 2u);
  EXPECT_TRUE(all_gone(children, 1s)) << "ddprun exited while a worker's child still ran";
}

}  // namespace
}  // namespace ddp::launcher::test
