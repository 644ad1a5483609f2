// A failing worker stops the others, the summary names it (or the rank the evidence points at),
// and --max_restarts starts over.
#include <signal.h>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Failure, AWorkerExitingNonZeroStopsTheOthersAndIsNamed) {
  TempDir dir;
  const auto start = Clock::now();
  Launch run(ddprun_worker(
      {"--nproc_per_node=3", port_flag(), "--grace_period=20", "--log_dir", dir.path()},
      {"--pid-dir", dir.path(), "--fail-rank", "1", "--fail-code", "7", "--fail-delay-ms", "300", "--then", "sleep"}));
  ASSERT_TRUE(run.wait());
  EXPECT_LT(Clock::now() - start, 10s) << "the others were not stopped promptly (the grace period is 20 s)";
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  expect_contains(
      run.err(),
      {"the job failed on attempt 1 of 1", "Root cause (first failure):", "rank       : 1 (local rank 1 on node 0)",
       "exit       : exit code 7", "log file   : " + dir.file("none/attempt_0/rank_1.log"), "[1]: rank 1 failing",
       "rank 0 (local rank 0, pid", "): stopped by ddprun (exit code 0)", "rank 1 (local rank 1, pid",
       "failed: exit code 7", "<- root cause"},
      run.all());
  // The others got SIGTERM (and handled it).
  expect_contains(run.out(), {"[0]:rank 0 got SIGTERM", "[2]:rank 2 got SIGTERM"}, run.all());
  EXPECT_TRUE(all_gone(pids_in(dir, "worker", 3)));
}

TEST(Failure, ACrashIsNamedByItsSignal) {
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag()},
                           {"--fail-rank", "0", "--fail-signal", std::to_string(SIGSEGV), "--then", "sleep"}));
  ASSERT_TRUE(run.wait());
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  expect_contains(
      run.err(),
      {"rank       : 0 (local rank 0 on node 0)", "signal SIGSEGV (11)", "the worker was killed by a signal",
       "[0]: rank 0 failing", "pass --log_dir DIR to keep each worker's output"},
      run.all());
}

TEST(Failure, AWorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  const auto start = Clock::now();
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--grace_period=1"},
                           {"--pid-dir", dir.path(), "--fail-rank", "0", "--fail-delay-ms", "300", "--then", "hang"}));
  ASSERT_TRUE(run.wait(30s));
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 1s) << "SIGKILL came before the grace period ended";
  EXPECT_LT(took, 8s);
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  expect_contains(run.err(), {"rank 1 (local rank 1, pid", "stopped by ddprun (signal SIGKILL (9))"}, run.all());
  EXPECT_TRUE(all_gone(pids_in(dir, "worker", 2)));
}

TEST(Failure, RestartsRunTheWholeGroupAgain) {
  // Rank 1 fails in attempts 0 and 1; attempt 2 succeeds.
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--max_restarts=2"},
                           {"--allreduce", "--fail-rank", "1", "--fail-below-restart", "2", "--print-env"}));
  ASSERT_TRUE(run.wait());
  EXPECT_EQ(run.exit_code(), 0) << run.all();
  EXPECT_EQ(count(run.err(), "Root cause (first failure)"), 2) << run.all();
  expect_contains(run.err(),
                  {"failed on attempt 1 of 3 (--max_restarts=2); restarting every worker (attempt 2)",
                   "failed on attempt 2 of 3 (--max_restarts=2); restarting every worker (attempt 3)"},
                  run.all());
  for (int attempt = 0; attempt < 3; ++attempt) {
    expect_contains(run.out(),
                    {"[0]:sum=3 world=2 rank=0 local_rank=0 attempt=" + std::to_string(attempt),
                     "[1]:ENV TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt)},
                    run.all());
  }
  expect_contains(run.out(), {"[1]:ENV TORCHELASTIC_MAX_RESTARTS=2"});
}

TEST(Failure, RestartsEndWhenTheyRunOut) {
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--max_restarts=1"}, {"--fail-rank", "0"}));
  ASSERT_TRUE(run.wait());
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  EXPECT_EQ(count(run.err(), "Root cause (first failure)"), 2) << run.all();
  expect_contains(run.err(), {"failed on attempt 2 of 2 (--max_restarts=1)\n"}, run.all());
}

TEST(Failure, ARestartClearsTheStoresLostRankRecords) {
  // Attempt 0: rank 1 kills itself after an all_reduce, so the store records it as lost; rank 0
  // sees the record (it ignores SIGTERM long enough to look). Attempt 1: the record is gone.
  Launch run(ddprun_worker(
      {"--nproc_per_node=2", port_flag(), "--max_restarts=1", "--grace_period=1.5"},
      {"--allreduce", "--fail-rank", "1", "--fail-signal", std::to_string(SIGKILL), "--fail-below-restart", "1",
       "--check-lost", "1", "--check-delay-ms", "600", "--then", "hang", "--then-below-restart", "1"}));
  ASSERT_TRUE(run.wait());
  EXPECT_EQ(run.exit_code(), 0) << run.all();
  expect_contains(run.out(),
                  {"[0]:lost 1: yes attempt=0", "[0]:sum=3 world=2 rank=0 local_rank=0 attempt=1",
                   "[0]:lost 1: no attempt=1", "[1]:lost 1: no attempt=1"},
                  run.all());
  expect_contains(run.err(), {"signal SIGKILL (9)"});
}

TEST(Failure, ARankThatTimedOutWaitingForAStoppedRankIsNotTheRootCause) {
  // Rank 1 is stopped (SIGSTOP) mid-training; rank 0 times out after 3 s and fails first.
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag()}, training_worker(dir)));
  ASSERT_TRUE(run.wait_for("[0]:rank 0 training")) << run.all();
  ASSERT_TRUE(run.wait_for("[1]:rank 1 training")) << run.all();
  const auto workers = suspend_rank_1(dir);
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_TRUE(run.wait(60s));
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  const std::string pid1 = std::to_string(workers[1]);
  expect_contains(run.err(),
                  {"Root cause: rank 1, which the first failure waited for\n  rank       : 1 (local rank 1 on node 0)",
                   "  pid        : " + pid1,
                   "  evidence   : ddprun found rank 1 suspended (state T in /proc/" + pid1 +
                       "/stat) when rank 0 failed, and rank 0's error says it waited for rank 1: ",
                   "First failure (a consequence of the root cause):\n  rank       : 0 (local rank 0 on node 0)",
                   "timed out after 3.0 s", "failed: exit code 1", "<- first failure",
                   "rank 1 (local rank 1, pid " + pid1 +
                       "): stopped by ddprun (signal SIGTERM (15)); it had been "
                       "suspended (state T in /proc/" +
                       pid1 + "/stat) when the attempt ended  <- root cause"},
                  run.all());
  EXPECT_EQ(run.err().find("Root cause (first failure)"), std::string::npos) << run.all();
  EXPECT_TRUE(all_gone(workers)) << "the stopped worker was not continued and stopped";
}

}  // namespace
}  // namespace ddp::launcher::test
