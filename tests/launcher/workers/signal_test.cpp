// SIGINT and SIGTERM to ddprun reach every worker, and a stop that reaches everyone at once is
// one stop: the workers finish their checkpoint, and ddprun reports a requested stop (not a
// failure) with the last checkpoint. After ddprun exits, however it exits, no worker (nor a
// worker's own child) is left running.
#include <signal.h>

#include "e2e.h"
#include "workers/signals.h"

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
    expect_contains(run.out(), {"[" + std::to_string(rank) + "]:rank " + std::to_string(rank) + " got " + name},
                    run.all());
  }
  expect_contains(run.err(),
                  {"ddprun: the job was stopped by " + name + " (a request, not a failure): ddprun on node 0",
                   "received " + name + " and stopped the job", "): stopped by ddprun (exit code 0)"},
                  run.all());
  EXPECT_EQ(run.err().find("failed"), std::string::npos) << run.all();
  EXPECT_EQ(run.err().find("checkpoint"), std::string::npos) << "no worker recorded a checkpoint:\n" << run.all();
  EXPECT_TRUE(all_gone(pids_in(dir, "worker", 3)));
  EXPECT_TRUE(all_gone(pids_in(dir, "child", 3))) << "a worker's own child outlived the job";
}

TEST(Signals, SigtermReachesEveryWorker) { expect_signal_reaches_every_worker(SIGTERM, "SIGTERM"); }

TEST(Signals, SigintReachesEveryWorker) { expect_signal_reaches_every_worker(SIGINT, "SIGINT"); }

// How the stop reaches ddprun and its workers.
enum class Delivery {
  GroupAfterProgram,  // timeout(1): the program, then its whole process group
  EveryProcess,       // Slurm (scancel, preemption): every process of the job step at once
};

// The workers take 800 ms to checkpoint after the signal; the grace period is 30 s.
void expect_one_graceful_stop(int sig, Delivery delivery) {
  const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  TempDir dir;
  const std::vector<std::string> argv =
      ddprun_worker({"--nproc_per_node=2", port_flag()},
                    {"--pid-dir", dir.path(), "--record-step", "41", "--then", "sleep", "--checkpoint-ms", "800"});
  Launch run(argv);
  ASSERT_TRUE(run.wait_for("[0]:rank 0 sleeping")) << run.all();
  ASSERT_TRUE(run.wait_for("[1]:rank 1 sleeping")) << run.all();
  const auto start = Clock::now();
  if (delivery == Delivery::GroupAfterProgram) {
    ::kill(run.pid(), sig);
    ::usleep(100000);  // ddprun has begun the stop: the copy must not cut it short
    ::kill(-run.pid(), sig);
  } else {
    for (pid_t worker : pids_in(dir, "worker", 2)) ::kill(worker, sig);
    ::kill(run.pid(), sig);
  }
  ASSERT_TRUE(run.wait(30s));
  EXPECT_LT(Clock::now() - start, 10s) << "the stop took as long as the grace period";
  EXPECT_EQ(run.exit_code(), 128 + sig) << run.all();
  expect_contains(run.out(), {"[0]:rank 0 checkpointed", "[1]:rank 1 checkpointed"}, run.all());
  expect_contains(
      run.err(),
      {"ddprun: the job was stopped by " + name + " (a request, not a failure)", "rank 0 (local rank 0, pid",
       "rank 1 (local rank 1, pid", "): stopped by ddprun (exit code 0)",
       "Last checkpoint: step 42, /checkpoints/step-42.ckpt (recorded by rank 0)",
       "To resume from it, run the same command again:\n  " + kDdprun + " --nproc_per_node=2 --master_port="},
      run.all());
  EXPECT_EQ(run.err().find("SIGKILL"), std::string::npos) << run.all();
  EXPECT_EQ(run.err().find("failed"), std::string::npos) << run.all();
  EXPECT_TRUE(all_gone(pids_in(dir, "worker", 2)));
}

TEST(Signals, AStopSentToTheProgramAndItsProcessGroupIsOneStop) {
  for (int round = 0; round < 3; ++round) {
    for (int sig : {SIGINT, SIGTERM}) {
      SCOPED_TRACE("round " + std::to_string(round) + ", signal " + std::to_string(sig));
      expect_one_graceful_stop(sig, Delivery::GroupAfterProgram);
    }
  }
}

TEST(Signals, AStopSentToEveryProcessAtOnceIsOneStop) {
  for (int round = 0; round < 3; ++round) {
    for (int sig : {SIGINT, SIGTERM}) {
      SCOPED_TRACE("round " + std::to_string(round) + ", signal " + std::to_string(sig));
      expect_one_graceful_stop(sig, Delivery::EveryProcess);
    }
  }
}

TEST(Signals, ASecondSigintKillsAtOnce) {
  // A second Ctrl-C a while after the first (more than kSameStopWindow) is a new request.
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--grace_period=60"},
                           {"--pid-dir", dir.path(), "--then", "hang"}));
  ASSERT_TRUE(run.wait_for("[0]:rank 0 hanging")) << run.all();
  ASSERT_TRUE(run.wait_for("[1]:rank 1 hanging")) << run.all();
  const auto start = Clock::now();
  run.signal(SIGINT);
  ::usleep(1500000);
  run.signal(SIGINT);
  ASSERT_TRUE(run.wait(30s));
  EXPECT_LT(Clock::now() - start, 10s) << "the second SIGINT did not cut the 60 s grace period short";
  EXPECT_EQ(run.exit_code(), 128 + SIGINT) << run.all();
  expect_contains(run.err(),
                  {"stopped by ddprun (signal SIGKILL (9))", "Not every worker ended within --grace_period=60.0 s"},
                  run.all());
  EXPECT_TRUE(all_gone(pids_in(dir, "worker", 2)));
}

TEST(Signals, TheStopWindowIsOneSecond) {
  EXPECT_FALSE(escalates_stop(std::chrono::milliseconds(0)));
  EXPECT_FALSE(escalates_stop(std::chrono::milliseconds(999)));
  EXPECT_TRUE(escalates_stop(std::chrono::milliseconds(1000)));
  EXPECT_TRUE(escalates_stop(std::chrono::seconds(20)));
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
