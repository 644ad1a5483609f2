// Reading whom a failed worker waited for, and choosing the root cause from the evidence. The
// texts are ddp's own diagnoses (group/diagnosis.cpp, shm/sync.cpp); Failure.* and MultiNode.*
// check the same against the real core's output.
#include <gtest/gtest.h>
#include <unistd.h>

#include "blame.h"

namespace ddp::launcher {
namespace {

using Ranks = std::vector<int>;

const std::string kBehind =
    "[ddp E 09:40:29 pid 20929] all_reduce #39 (float32 x 1, SUM) in group 'world' on rank 0 timed out after 3.0 s "
    "(the group's timeout is 3.0 s): shared-memory all_reduce: waited for rank 1 (pid 20930), which did not arrive. "
    "Ranks that had not reached all_reduce #39 (float32 x 1, SUM): rank 1: its last was all_reduce #38 (float32 x 1, "
    "SUM), finished. Such a rank may be stopped (SIGSTOP, a debugger), stuck or slow in its own work, or skipping "
    "this collective (a rank-dependent branch).";

TEST(Blame, ReadsEveryDiagnosisOfTheCore) {
  EXPECT_EQ(ranks_waited_for(kBehind), Ranks({1}));
  EXPECT_EQ(ranks_waited_for("x timed out: Ranks that had not reached barrier #4: rank 2: it has not started any "
                             "collective in this group; rank 3 (global rank 7): its last was send #2 (float32 x 4, to "
                             "rank 5, tag 0), finished. Such a rank may be stopped"),
            Ranks({2, 7}))
      << "a rank inside an op's description (to rank 5) is not one waited for";
  EXPECT_EQ(ranks_waited_for("Every rank reached all_reduce #3 (float32 x 4, SUM); still inside it: rank 1, rank 2 "
                             "(global rank 6). A rank stopped inside the collective"),
            Ranks({1, 6}));
  EXPECT_EQ(ranks_waited_for("failed after 1.0 s: peer closed. Lost rank 3 (pid 77 on node02: reset): its connection "
                             "to the store closed without a goodbye"),
            Ranks({3}));
  EXPECT_EQ(ranks_waited_for("Lost ranks: rank 1 (pid 5 on a); rank 2 (global rank 4) (pid 6 on b): its connection "
                             "to the store closed without a goodbye"),
            Ranks({1, 4}));
  EXPECT_EQ(ranks_waited_for("shared-memory barrier: waited for rank 2 (pid 9), rank 3 (pid 10), which did not arrive"),
            Ranks({2, 3}));
  // A rank stopped before it joined the group (group/join.cpp).
  EXPECT_EQ(ranks_waited_for("train: init_process_group: group 'world': rank 0 of 2 did not join within 5.0 s. They "
                             "may not have been started"),
            Ranks({0}));
  EXPECT_EQ(ranks_waited_for("group 'world': ranks 0, 3 of 4 did not join within 5.0 s. They may not"), Ranks({0, 3}));
}

TEST(Blame, AFailureFirstElsewherePointsPastThatRank) {
  // Rank 2 failed first because it waited for rank 3: rank 3 is the one.
  EXPECT_EQ(ranks_waited_for("broadcast #5 failed after 2.0 s: aborted. Rank 2 failed first: all_reduce #5 timed out "
                             "after 3.0 s: x. Ranks that had not reached all_reduce #5 (float32 x 1, SUM): rank 3: "
                             "its last was all_reduce #4 (float32 x 1, SUM), finished. Such a rank may"),
            Ranks({3}));
  // Rank 2 failed on its own: rank 2.
  EXPECT_EQ(ranks_waited_for("all_reduce #5 failed after 0.1 s: reset. Rank 2 failed first: out of memory"), Ranks({2}));
}

TEST(Blame, TextWithoutADiagnosisNamesNobody) {
  EXPECT_TRUE(ranks_waited_for("loss is nan at step 12, rank 1 gives up").empty());
  EXPECT_TRUE(ranks_waited_for("Ranks that had not reached").empty());
  EXPECT_TRUE(ranks_waited_for("waited for rank x").empty());
  EXPECT_TRUE(ranks_waited_for("still inside it: rank 99999999999999999999").empty());
  EXPECT_FALSE(may_name_ranks_waited_for("epoch 1 loss 0.3"));
  EXPECT_TRUE(may_name_ranks_waited_for(kBehind));
  EXPECT_TRUE(may_name_ranks_waited_for("RuntimeError: [gloo] Timed out waiting 1800000ms for recv"));
}

TEST(Blame, AStoppedRankTheErrorNamesIsTheRootCause) {
  const std::vector<SuspendedWorker> suspended = {{1, "suspended (state T in /proc/20930/stat)"}};
  auto culprit = find_root_cause(0, {"rank 0 training", kBehind}, suspended);
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
  const std::string error =
      "[1]: train_fashion_mnist: init_process_group: group 'world': rank 0 of 2 did not join within 5.0 s. They may "
      "not have been started, may have crashed before joining, or may be using another MASTER_ADDR/MASTER_PORT or "
      "WORLD_SIZE.";
  EXPECT_TRUE(may_name_ranks_waited_for(error));
  auto culprit = find_root_cause(1, {error}, suspended);
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 0);
  for (const char* f : {"ddprun found rank 0 suspended", "rank 1's error says it waited for rank 0",
                        "group 'world': rank 0 of 2 did not join"}) {
    EXPECT_NE(culprit->evidence.find(f), std::string::npos) << "missing '" << f << "' in: " << culprit->evidence;
  }
}

TEST(Blame, TheErrorAloneNamesARankOfAnotherNode) {
  auto culprit = find_root_cause(0, {kBehind}, {});
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 1);
  EXPECT_EQ(culprit->evidence.find("ddprun found"), std::string::npos) << culprit->evidence;
  EXPECT_NE(culprit->evidence.find("rank 0's error says it waited for rank 1"), std::string::npos) << culprit->evidence;
}

TEST(Blame, AStoppedRankExplainsATimeoutThatNamesNobody) {
  // A PyTorch program's error: no ddp diagnosis, but a timeout while rank 1 was stopped.
  const std::vector<SuspendedWorker> suspended = {{1, "suspended (state T in /proc/5/stat)"}};
  auto culprit = find_root_cause(0, {"RuntimeError: [gloo] Timed out waiting 1800000ms for recv operation"}, suspended);
  ASSERT_TRUE(culprit);
  EXPECT_EQ(culprit->rank, 1);
  EXPECT_NE(culprit->evidence.find("failed with a timeout (its error names no rank it waited for)"), std::string::npos);
  // Not a timeout: a failure of its own, whatever else is stopped.
  EXPECT_FALSE(find_root_cause(0, {"loss is nan"}, suspended));
  // Nothing stopped, nobody named: the first failure is the root cause.
  EXPECT_FALSE(find_root_cause(0, {"RuntimeError: Timed out"}, {}));
  // The failed rank naming itself (or only itself) is no evidence.
  EXPECT_FALSE(find_root_cause(1, {kBehind}, {}));
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
