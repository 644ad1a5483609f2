// What ranks on one host see when a peer dies, stops or gives up in the middle of a shared-memory
// collective, and that no segment outlives the job.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "group/progress.h"
#include "shm_support.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::expect_error;

std::string temp_path(const char* what) { return "/tmp/ddp-shm-test-" + std::to_string(::getpid()) + "-" + what; }

// With `shared`, the buffer is in shared memory (allocate_shared_memory): the peers read it where
// it is, in the dead rank's memory.
class ShmKilledMidAllReduce : public ::testing::TestWithParam<bool> {};

TEST_P(ShmKilledMidAllReduce, APeerKilledMidAllReduceIsAnErrorNamingItNotAHang) {
  const auto before = test::dev_shm_entries();
  const std::string done_file = temp_path("killed-done");
  const bool shared = GetParam();
  test::run_ranks(
      3,
      [&](int rank, int) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    ASSERT_EQ(test::shm_mappings().size(), 1u);
    const std::size_t n = 16 << 20;  // 64 MB: many chunks
    std::vector<float> ordinary;
    std::shared_ptr<void> memory;
    float* data = nullptr;
    if (shared) {
      memory = group->allocate_shared_memory(n * sizeof(float));
      ASSERT_TRUE(memory);
      data = static_cast<float*>(memory.get());
      std::fill(data, data + n, 1.0f);
    } else {
      ordinary.assign(n, 1.0f);
      data = ordinary.data();
    }
    group->all_reduce(buffer_of(data, 16))->wait();
    // Rank 1 dies inside the all_reduce, which cannot have finished: rank 2 joins it only later.
    // Rank 0 is waiting in it when rank 1 dies; rank 2 finds it dead on arrival.
    if (rank == 1) {
      auto work = group->all_reduce(buffer_of(data, n));
      std::this_thread::sleep_for(20ms);
      ::raise(SIGKILL);
    }
    if (rank == 2) std::this_thread::sleep_for(300ms);
    const auto start = Clock::now();
    auto message =
        expect_error<PeerLostError>([&] { group->all_reduce(buffer_of(data, n))->wait(); },
                                    {"all_reduce #1", "shared-memory all_reduce", "rank 1 (pid ", "Lost rank 1"});
    EXPECT_LT(Clock::now() - start, 30s) << "the timeout is 60 s: the death should be noticed long before";
    // Later ops fail at once with the same error.
    expect_error<PeerLostError>([&] { group->barrier()->wait(); }, {"Lost rank 1"});
    // Rank 0 hosts the store, whose records name the lost rank: it stays until rank 2 has read them
    // (without the store the error can only say that the store is gone too).
    if (rank == 2) std::ofstream(std::getenv("DONE_FILE")) << "done";
    if (rank == 0) {
      for (int i = 0; i < 600 && ::access(std::getenv("DONE_FILE"), F_OK) != 0; ++i) std::this_thread::sleep_for(50ms);
    }
      },
      {.env = {{"DONE_FILE", done_file}}, .killed = {1}});
  if (test::is_rank_process()) return;
  ::unlink(done_file.c_str());
  EXPECT_EQ(test::dev_shm_entries(), before) << "something was left in /dev/shm";
}

INSTANTIATE_TEST_SUITE_P(Buffers, ShmKilledMidAllReduce, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "shared" : "ordinary"; });

// The op, and the placement: "2x2" (striped; the gathers too, DDP_SHM_GATHER_STRIPE_BYTES=0) or
// "2and3" (unequal: through the hosts' first ranks).
class ShmFailuresAcrossHosts : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ShmFailuresAcrossHosts, APeerKilledMidCollectiveIsAnErrorNamingItOnEveryHost) {
  // Two simulated hosts, of two ranks each (the op is striped and pipelined, cpu/hierarchy.h) or
  // of two and three. Rank 3 dies inside the op. Its host's ranks find it in shared memory or
  // through the group's records, its lane's (striped) find their connection closed, the others
  // hear of it through the group's records: all name it.
  const auto [op, placement] = GetParam();
  const bool unequal = placement == "2and3";
  const std::string done_file = temp_path(("hosts-killed-done-" + op + placement).c_str());
  test::run_ranks(
      unequal ? 5 : 4,
      [&](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    // all_reduce: 64 MB, 8 chunks of the pipeline; the gathers: 16 MB blocks, 64 MB of the
    // group's data in all, 8 chunks too.
    const std::size_t block = op == "all_reduce" ? 16u << 20 : 4u << 20;
    std::vector<float> big(block * (op == "reduce_scatter" ? world : 1), 1.0f);
    std::vector<float> out(block * (op == "all_gather" ? world : 1));
    const auto run = [&] {
      if (op == "all_reduce") return group->all_reduce(buffer_of(big.data(), big.size()));
      if (op == "all_gather") return group->all_gather(buffer_of(big.data(), block), buffer_of(out.data(), out.size()));
      return group->reduce_scatter(buffer_of(big.data(), big.size()), buffer_of(out.data(), block));
    };
    group->all_reduce(buffer_of(big.data(), 16))->wait();
    if (rank == 3) {
      auto work = run();
      std::this_thread::sleep_for(50ms);
      ::raise(SIGKILL);
    }
    // Rank 0 joins late, so the op cannot finish before rank 3 dies (on a fast machine the others
    // could otherwise complete it within those 50 ms: rank 3's part in 2 + 3 is small).
    if (rank == 0) std::this_thread::sleep_for(300ms);
    const auto start = Clock::now();
    const auto message = expect_error<Error>([&] { run()->wait(); }, {op + " #1", "Lost rank 3 (pid "});
    EXPECT_LT(Clock::now() - start, 30s) << "the timeout is 60 s: the death should be noticed long before";
    if (rank == 2 && op == "all_reduce" && !unequal) {
      EXPECT_NE(message.find("shared-memory all_reduce"), std::string::npos) << message;
    }
    expect_error<Error>([&] { group->barrier()->wait(); }, {"rank 3"});
    // Rank 0 hosts the store: it stays until the others have read its records.
    if (rank != 0) {
      std::ofstream(std::string(std::getenv("DONE_FILE")) + std::to_string(rank)) << "done";
    } else {
      for (int r = 1; r < world; ++r) {
        if (r == 3) continue;
        const std::string done = std::string(std::getenv("DONE_FILE")) + std::to_string(r);
        for (int i = 0; i < 600 && ::access(done.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(50ms);
      }
    }
      },
      {.env = {{"DONE_FILE", done_file}, {"DDP_SHM_GATHER_STRIPE_BYTES", "0"}},
       .killed = {3},
       .rank_env = [](int rank) {
         return std::map<std::string, std::string>{{"DDP_SHM_HOST_ID", rank < 2 ? "a" : "b"}};
       }});
  if (test::is_rank_process()) return;
  for (int r = 1; r < 5; ++r) ::unlink((done_file + std::to_string(r)).c_str());
}

INSTANTIATE_TEST_SUITE_P(Ops, ShmFailuresAcrossHosts,
                         ::testing::Combine(::testing::Values("all_reduce", "all_gather", "reduce_scatter"),
                                            ::testing::Values("2x2", "2and3")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(ShmFailures, RanksThatCallDifferentCollectivesAreToldWhichWithoutDdpDebug) {
  // Without DDP_DEBUG's agreement check the shared-memory ops compare signatures: a barrier met by
  // an all_reduce, or two sizes, fail at once on one host instead of mixing the two ops' data.
  // The rank that sees it first aborts the group, so the other may report that instead.
  auto results = test::run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s, .variables = {{"DDP_DEBUG", "0"}}});
    auto group = get_default_group();
    ASSERT_EQ(test::shm_mappings().size(), 1u);
    std::vector<float> x(1 << 20, 1.0f);
    group->all_reduce(buffer_of(x.data(), 4))->wait();
    auto mismatched = [&] {
      if (rank == 0) group->barrier()->wait();
      else group->all_reduce(buffer_of(x.data(), 4))->wait();
    };
    const auto start = Clock::now();
    try {
      mismatched();
      ADD_FAILURE() << "no error";
    } catch (const MismatchError& e) {
      const std::string other = rank == 0 ? "rank 1 (pid " : "rank 0 (pid ";
      const std::string mine = rank == 0 ? "called barrier where " : "called all_reduce (float32 x 4, SUM) where ";
      const std::string theirs = rank == 0 ? "called all_reduce (float32 x 4, SUM)" : "called barrier";
      for (const auto& f : {std::string("the ranks called different collectives"), other, mine, theirs}) {
        EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "missing '" << f << "' in: " << e.what();
      }
      std::fprintf(stderr, "MISMATCH SEEN: %s\n", e.what());
    } catch (const PeerLostError& e) {
      EXPECT_NE(std::string(e.what()).find("gave up on the group"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - start, 10s) << "the timeout is 30 s: a mismatch is seen at once";
  });
  if (test::is_rank_process()) return;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].output.find("MISMATCH SEEN") != std::string::npos ||
              results[1].output.find("MISMATCH SEEN") != std::string::npos)
      << "neither rank named the mismatch:\n"
      << results[0].output << results[1].output;
}

TEST(ShmFailures, ARankTwoOpsAheadOfASleepingPeerIsNoMismatch) {
  // Rank 1 arrives last, finishes a one-step all_reduce, a broadcast it roots (neither waits for
  // the others' later steps) and publishes a barrier while ranks 0 and 2 still sleep in the
  // all_reduce: its barrier must not overwrite the all_reduce's signature before they read it.
  // (It did, and they threw "called all_reduce where rank 1 called barrier".)
  test::run_ranks(3, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s, .variables = {{"DDP_DEBUG", "0"}}});
    auto group = get_default_group();
    ASSERT_EQ(test::shm_mappings().size(), 1u);
    for (int round = 0; round < 100; ++round) {
      std::vector<float> x(4, static_cast<float>(rank + 1)), y(4, static_cast<float>(rank));
      if (rank == 1) std::this_thread::sleep_for(5ms);  // the others park on the futex
      group->all_reduce(buffer_of(x.data(), 4))->wait();
      group->broadcast(buffer_of(y.data(), 4), 1)->wait();
      group->barrier()->wait();
      ASSERT_EQ(x, std::vector<float>(4, 6.0f)) << "round " << round;
      ASSERT_EQ(y, std::vector<float>(4, 1.0f)) << "round " << round;
    }
  });
}

TEST(ShmFailures, TwoSizesOfOneAllReduceAreAMismatchNamingBoth) {
  auto results = test::run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s, .variables = {{"DDP_DEBUG", "0"}}});
    auto group = get_default_group();
    std::vector<float> x(1 << 20, 1.0f);
    const std::size_t count = rank == 0 ? 16 : x.size();  // small path against large path
    try {
      group->all_reduce(buffer_of(x.data(), count))->wait();
      ADD_FAILURE() << "no error";
    } catch (const MismatchError& e) {
      // Seen here (the op's signature check) or explained from the peer's record when the peer saw
      // it first: both name both calls.
      EXPECT_NE(std::string(e.what()).find("(float32 x 16, SUM)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("(float32 x 1048576, SUM)"), std::string::npos) << e.what();
      std::fprintf(stderr, "MISMATCH SEEN: %s\n", e.what());
    } catch (const PeerLostError& e) {
      EXPECT_NE(std::string(e.what()).find("gave up on the group"), std::string::npos) << e.what();
    }
  });
  if (test::is_rank_process()) return;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].output.find("MISMATCH SEEN") != std::string::npos ||
              results[1].output.find("MISMATCH SEEN") != std::string::npos)
      << results[0].output << results[1].output;
}

TEST(ShmFailures, SmallAllReducesOfDifferentSizesOnTwoHostsAreAMismatchNamingGroupRanks) {
  // Each host agrees within itself; the hosts' leaders' small all_reduce (recursive doubling over
  // TCP, in a context of its own) finds that they differ and names both calls with the group's
  // ranks, not the leaders' context's. Every rank fails at once.
  test::run_ranks(
      4,
      [](int rank, int world) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    std::vector<float> data(rank < 2 ? 100 : 1000, 1.0f);
    const auto start = Clock::now();
    const auto message =
        expect_error<Error>([&] { group->all_reduce(buffer_of(data.data(), data.size()))->wait(); }, {"all_reduce #0"});
    EXPECT_LT(Clock::now() - start, 15s) << "the timeout is 30 s";
    // Both leaders see the mismatch first hand: the one that reads it first lets its own header
    // reach the other before it closes the connection (else the other told of a lost peer).
    if (rank == 0 || rank == 2) {
      const std::string mine = rank == 0 ? "(float32 x 100, SUM)" : "(float32 x 1000, SUM)";
      const std::string theirs = rank == 0 ? "(float32 x 1000, SUM)" : "(float32 x 100, SUM)";
      const std::string peer = rank == 0 ? "2" : "0";
      const std::string part = "this rank (rank " + std::to_string(rank) + ") called all_reduce " + mine +
                               " where rank " + peer + " called all_reduce " + theirs;
      EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
    }
    // Rank 0 hosts the store: it stays until the others have read its records.
    const std::string done_file = std::getenv("DONE_FILE");
    if (rank != 0) {
      std::ofstream(done_file + std::to_string(rank)) << "done";
    } else {
      for (int r = 1; r < world; ++r) {
        const std::string done = done_file + std::to_string(r);
        for (int i = 0; i < 400 && ::access(done.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(50ms);
        ::unlink(done.c_str());
      }
    }
      },
      {.env = {{"DONE_FILE", temp_path("hosts-mismatch-done")}}, .rank_env = [](int rank) {
         return std::map<std::string, std::string>{{"DDP_SHM_HOST_ID", rank < 2 ? "a" : "b"}};
       }});
}

TEST(ShmFailures, AStoppedPeerTimesOutNamingIt) {
  const std::string pid_file = temp_path("stopped-pid");
  const std::string done_file = temp_path("stopped-done");
  test::run_ranks(
      3,
      [&](int rank, int) {
    init_process_group("gloo", {.timeout = 3s});
    auto group = get_default_group();
    float x = 1;
    group->all_reduce(buffer_of(&x, 1))->wait();
    if (rank == 2) {
      detail::publish_progress_now();  // where it stopped, in the store before it stops
      test::stop_this_rank();
      return;
    }
    std::vector<float> data(1 << 20, 1.0f);  // large: the two-step path
    // Ranks 0 and 1 time out together: the first to give up aborts the group, so the other may
    // fail a moment earlier with a PeerLostError that carries the first one's timeout.
    auto message = expect_error<Error>([&] { group->all_reduce(buffer_of(data.data(), data.size()))->wait(); },
                                       {"all_reduce #1 (float32 x 1048576, SUM) in group 'world' on rank ", "timed out",
                                        "shared-memory all_reduce: waited for rank 2 (pid ", "which did not arrive",
                                        "rank 2: its last was all_reduce #0"});
    EXPECT_EQ(message.find("waited for rank " + std::to_string(1 - rank)), std::string::npos)
        << "only the stopped rank is missing: " << message;
    if (rank == 0) {
      const int stopped = test::stopped_rank_pid();
      EXPECT_NE(message.find("rank 2 (pid " + std::to_string(stopped) + ")"), std::string::npos) << message;
      // Rank 1 reads the pid file and the store (rank 0 hosts it) too: rank 0 stays until it is done.
      for (int i = 0; i < 600 && ::access(std::getenv("DONE_FILE"), F_OK) != 0; ++i) std::this_thread::sleep_for(50ms);
      if (stopped > 0) ::kill(stopped, SIGKILL);
    } else {
      std::ofstream(std::getenv("DONE_FILE")) << "done";
    }
      },
      {.env = {{"PID_FILE", pid_file}, {"DONE_FILE", done_file}}, .killed = {2}});
  if (test::is_rank_process()) return;
  ::unlink(pid_file.c_str());
  ::unlink(done_file.c_str());
}

TEST(ShmFailures, ARankThatGivesUpReleasesItsPeersAtOnce) {
  // Rank 2 is late; rank 0 has a short timeout, fails, and aborts the group: rank 1, whose
  // timeout is long, must fail at once naming rank 0 rather than wait for its own timeout.
  const std::string done_file = temp_path("done");
  auto results = test::run_ranks(
      3,
      [&](int rank, int) {
    init_process_group("gloo", {.timeout = 120s});
    auto group = get_default_group();
    float x = 1;
    group->all_reduce(buffer_of(&x, 1))->wait();
    if (rank == 0) group->set_timeout(1s);
    if (rank == 2) {  // alive, but never calls the next all_reduce; leaves when the others are done
      for (int i = 0; i < 600 && ::access(std::getenv("DONE_FILE"), F_OK) != 0; ++i) std::this_thread::sleep_for(100ms);
      ::_exit(0);
    }
    const auto start = Clock::now();
    if (rank == 0) {
      expect_error<TimeoutError>([&] { group->all_reduce(buffer_of(&x, 1))->wait(); },
                                 {"all_reduce #1", "timed out", "waited for rank 2"});
    } else {
      expect_error<PeerLostError>([&] { group->all_reduce(buffer_of(&x, 1))->wait(); },
                                  {"all_reduce #1", "rank 0 (pid ", "gave up on the group"});
      EXPECT_LT(Clock::now() - start, 20s) << "rank 1 waited on although rank 0 had given up";
      std::ofstream(std::getenv("DONE_FILE")) << "done";
    }
      },
      {.env = {{"DONE_FILE", done_file}}, .expect_success = false});
  if (test::is_rank_process()) return;
  ::unlink(done_file.c_str());
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << results[0].output;
  EXPECT_TRUE(results[1].ok()) << results[1].output;
}

TEST(ShmSegments, HaveNoNameAnywhereSoNothingOutlivesTheJob) {
  const auto before = test::dev_shm_entries();
  test::run_ranks(3, [](int rank, int) {
    init_process_group("gloo", {.timeout = 60s});
    auto lines = test::shm_mappings();
    ASSERT_EQ(lines.size(), 1u);
    // An anonymous memory file: nothing in /dev/shm or any other file system names it.
    EXPECT_NE(lines[0].find("/memfd:ddp-shm (deleted)"), std::string::npos) << lines[0];
    std::int64_t v = rank;
    get_default_group()->all_reduce(buffer_of(&v, 1))->wait();
    EXPECT_EQ(v, 3);
    for (const auto& name : test::dev_shm_entries()) EXPECT_EQ(name.find("ddp"), std::string::npos) << name;
    destroy_process_group();
  });
  if (test::is_rank_process()) return;
  EXPECT_EQ(test::dev_shm_entries(), before) << "something was left in /dev/shm";
}

TEST(ShmSetup, ARankThatCannotMapTheSegmentMakesTheGroupFallBackToGloo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a rank as another user";
  auto results = test::run_ranks(2, [](int rank, int) {
    if (rank == 1) {
      // Another user cannot open rank 0's /proc/<pid>/fd: the setup fails on this rank.
      ASSERT_EQ(::setgid(65534), 0);
      ASSERT_EQ(::setuid(65534), 0);
      ::prctl(PR_SET_DUMPABLE, 1);
    }
    init_process_group("gloo", {.timeout = 60s});
    EXPECT_EQ(test::shm_mappings().size(), 0u);
    std::int64_t v = rank + 1;
    get_default_group()->all_reduce(buffer_of(&v, 1))->wait();
    EXPECT_EQ(v, 3);
    destroy_process_group();
  });
  if (test::is_rank_process()) return;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].output.find("shared memory is off for this group of 2 ranks"), std::string::npos)
      << results[0].output;
  EXPECT_NE(results[0].output.find("rank 1: cannot open /proc/"), std::string::npos) << results[0].output;
}

}  // namespace
}  // namespace ddp
