// What other ranks see when a rank dies, stops, is late, or calls something else.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <initializer_list>
#include <thread>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "group/progress.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using test::expect_error;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string temp_path(const char* what) { return "/tmp/ddp-test-" + std::to_string(::getpid()) + "-" + what; }

// Rank 0 hosts the store that the others' diagnoses read: it stays until each rank in `waited`
// (told by the file DONE_FILE.<rank>) is done.
void hold_the_store_until_done(int rank, std::initializer_list<int> waited) {
  const std::string done = std::getenv("DONE_FILE");
  if (rank != 0) std::ofstream(done + "." + std::to_string(rank)) << "done";
  for (int r : waited) {
    const std::string file = done + "." + std::to_string(r);
    for (auto until = Clock::now() + 20s; rank == 0 && !std::ifstream(file) && Clock::now() < until;) {
      std::this_thread::sleep_for(10ms);
    }
    if (rank == 0) ::unlink(file.c_str());
  }
}

// Over Gloo's TCP pairs (DDP_SHM=0); ShmFailures has the same case on shared memory.
TEST(Failures, APeerKilledMidCollectiveIsNamedOnEveryOtherRank) {
  const std::string done_file = temp_path("rank1-done");
  const auto ranks = test::run_ranks(
      3,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    std::vector<float> big(16 << 20, 1.0f);  // 64 MB: long enough to be killed in the middle
    group->all_reduce(buffer_of(big.data(), 16))->wait();
    if (rank == 2) {
      auto work = group->all_reduce(buffer_of(big.data(), big.size()));
      std::this_thread::sleep_for(20ms);
      ::raise(SIGKILL);
    }
    const auto start = Clock::now();
    auto first = expect_error<PeerLostError>([&] { group->all_reduce(buffer_of(big.data(), big.size()))->wait(); },
                                             {"all_reduce #1", "group 'world'", "Lost rank 2", "died"});
    const auto known = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::printf("rank %d: the loss was known after %lld ms\n", rank, static_cast<long long>(known.count()));
    EXPECT_LT(known, 15s) << "took longer than necessary: the timeout is 30 s";
    // The group is unusable now, and says why at once.
    const auto again = Clock::now();
    auto later = expect_error<PeerLostError>([&] { group->barrier()->wait(); }, {"Lost rank 2"});
    EXPECT_EQ(later, first);
    EXPECT_LT(Clock::now() - again, 1s);
    hold_the_store_until_done(rank, {1});
      },
      {.env = {{"DDP_SHM", "0"}, {"DONE_FILE", done_file}}, .killed = {2}});
  if (test::is_rank_process()) return;
  ::unlink(done_file.c_str());
  for (const auto& r : ranks) {  // for the record (docs/RELIABILITY.md): how soon each survivor knew
    if (const auto at = r.output.find("the loss was known"); at != std::string::npos) {
      std::printf("rank %d: %s\n", r.rank, r.output.substr(at, r.output.find('\n', at) - at).c_str());
    }
  }
}

// The same on the small all_reduce's recursive doubling (DDP_SHM=0, 3 ranks: rank 0 folds into
// rank 1, which exchanges with rank 2): rank 2 dies instead of joining all_reduce #1.
TEST(Failures, APeerLostInASmallAllReduceOverTcpIsNamed) {
  const std::string done_file = temp_path("rank1-done-small");
  test::run_ranks(
      3,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    std::vector<float> small(1024, 1.0f);
    group->all_reduce(buffer_of(small.data(), small.size()))->wait();
    EXPECT_EQ(small[0], 3.0f);
    if (rank == 2) ::raise(SIGKILL);
    const auto start = Clock::now();
    expect_error<PeerLostError>([&] { group->all_reduce(buffer_of(small.data(), small.size()))->wait(); },
                                {"all_reduce #1", "group 'world'", "Lost rank 2", "died"});
    EXPECT_LT(Clock::now() - start, 15s) << "took longer than necessary: the timeout is 30 s";
    hold_the_store_until_done(rank, {1});
      },
      {.env = {{"DDP_SHM", "0"}, {"DONE_FILE", done_file}}, .killed = {2}});
  if (!test::is_rank_process()) ::unlink(done_file.c_str());
}

// Small all_reduces across TCP take recursive doubling, whose partners send their call before
// their data: different sizes are a mismatch named at once, not a receive overflowed in Gloo's
// network thread (which ends the process). Three ranks: rank 2 folds into rank 0 first.
TEST(Failures, SmallAllReducesOfDifferentSizesOverTcpAreAMismatchNamingBothCalls) {
  const std::string done_file = temp_path("mismatch-done");
  test::run_ranks(
      3,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    std::vector<float> data(rank == 1 ? 1000 : 100, 1.0f);
    const auto start = Clock::now();
    // The rank whose partner's header came first names both calls from it; its partner, whose
    // connection then closed, from the first one's progress record: both name both calls.
    if (rank == 0) {
      expect_error<MismatchError>(
          [&] { group->all_reduce(buffer_of(data.data(), data.size()))->wait(); },
          {"all_reduce #0", "(float32 x 100, SUM)", "rank 1 called all_reduce", "(float32 x 1000, SUM)"});
    } else if (rank == 1) {
      expect_error<MismatchError>(
          [&] { group->all_reduce(buffer_of(data.data(), data.size()))->wait(); },
          {"all_reduce #0", "(float32 x 1000, SUM)", "rank 0 called all_reduce", "(float32 x 100, SUM)"});
    } else {  // waiting for the result from rank 0, which gave up on the group
      try {
        group->all_reduce(buffer_of(data.data(), data.size()))->wait();
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        // From rank 1's progress record, or from rank 0's note if that record was not there yet.
        const std::string message = e.what();
        EXPECT_NE(message.find("all_reduce #0 (float32 x 100, SUM) in group 'world' on rank 2"), std::string::npos)
            << message;
        EXPECT_TRUE(message.find("rank 1 called all_reduce #0 (float32 x 1000, SUM)") != std::string::npos ||
                    message.find("Rank 0 failed first: all_reduce #0") != std::string::npos)
            << message;
      }
    }
    EXPECT_LT(Clock::now() - start, 15s) << "took longer than necessary: the timeout is 30 s";
    hold_the_store_until_done(rank, {1, 2});
      },
      {.env = {{"DDP_SHM", "0"}, {"DONE_FILE", done_file}}});
}

// Above the doubling threshold Gloo's ring runs, which cannot check its peers' calls: rank 1's
// receive is overflowed by rank 0's larger chunk, an assertion in Gloo's network thread that ends
// the process. Rank 1 says why before it ends; rank 0 names both calls, rank 1's death and that
// reason, whether the store recorded the loss before rank 0 looked or not.
TEST(Failures, ARingOverflowedByALargerAllReduceEndsTheRankExplainingWhy) {
  auto results = test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    std::vector<float> data(rank == 0 ? 600000 : 300000, 1.0f);  // 2.4 MB and 1.2 MB: both the ring
    if (rank == 1) {
      group->all_reduce(buffer_of(data.data(), data.size()))->wait();
      return;  // not reached: the process ends in Gloo's thread
    }
    expect_error<MismatchError>([&] { group->all_reduce(buffer_of(data.data(), data.size()))->wait(); },
                                {"all_reduce #0 (float32 x 600000, SUM) in group 'world' on rank 0",
                                 "rank 1 called all_reduce #0 (float32 x 300000, SUM)",
                                 "Rank 1 failed first: Gloo's network thread ends this process"});
      },
      {.env = {{"DDP_SHM", "0"}}, .expect_success = false});
  if (test::is_rank_process()) return;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << results[0].output;
  EXPECT_EQ(results[1].signal, SIGABRT) << results[1].output;
  for (const char* part : {"a peer sent a message of", "bytes for a receive of",
                           "in flight on this rank: all_reduce #0 (float32 x 300000, SUM) in group 'world' on rank 1",
                           "ddp::join", "DDP_DEBUG=1", "flight recorder: wrote"}) {
    EXPECT_NE(results[1].output.find(part), std::string::npos) << "missing '" << part << "' in:\n" << results[1].output;
  }
}

TEST(Failures, GlooIgnoresSigpipeUnlessTheProgramHandlesIt) {
  // A write to a dead peer's socket raises SIGPIPE, which by default kills the writer before its
  // error can name the peer (the test above lost rank 0 to signal 13 once in 20 runs under ASan).
  test::run_ranks(
      2,
      [](int rank, int) {
    if (rank == 1) ::signal(SIGPIPE, [](int) {});  // the program's own handler stays
    init_process_group("gloo", {.timeout = 30s});
    struct sigaction now {};
    ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
    if (rank == 0) {
      EXPECT_EQ(now.sa_handler, SIG_IGN);
    } else {
      EXPECT_NE(now.sa_handler, SIG_IGN);
      EXPECT_NE(now.sa_handler, SIG_DFL);
    }
    destroy_process_group();
      },
      {.env = {{"DDP_SHM", "0"}}});
}

TEST(Failures, AStoppedPeerTimesOutNamingItAndWhereItStopped) {
  const std::string pid_file = temp_path("stopped-pid");
  test::run_ranks(
      2,
      [&](int rank, int) {
    init_process_group("gloo", {.timeout = 3s});
    auto group = get_default_group();
    float x = 1;
    group->all_reduce(buffer_of(&x, 1))->wait();
    if (rank == 1) {
      detail::publish_progress_now();  // where it stopped, in the store before it stops
      test::stop_this_rank();
      return;
    }
    const auto start = Clock::now();
    expect_error<TimeoutError>([&] { group->all_reduce(buffer_of(&x, 1))->wait(); },
                               {"all_reduce #1 (float32 x 1, SUM) in group 'world' on rank 0 timed out",
                                "had not reached all_reduce #1", "rank 1: its last was all_reduce #0", "SIGSTOP"});
    EXPECT_LT(Clock::now() - start, 13s);
    if (const int pid = test::stopped_rank_pid(); pid > 0) ::kill(pid, SIGKILL);
      },
      {.env = {{"PID_FILE", pid_file}}, .killed = {1}});
  if (!test::is_rank_process()) ::unlink(pid_file.c_str());
}

// Gloo's waits are given the time left until the op's deadline, and the clock then tells a timeout
// from a broken connection: a peer that stays connected but silent must be a timeout every time (a
// wait given the time left rounded down ended up to a millisecond early, and was called a lost peer).
TEST(Failures, ASilentPeerOverGlooIsATimeoutEveryTime) {
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    for (int round = 0; round < 12; ++round) {
      auto group = new_group({0, 1}, 150ms);
      float x = 1;
      if (rank == 0) {
        expect_error<TimeoutError>([&] { group->all_reduce(buffer_of(&x, 1))->wait(); },
                                   {"all_reduce #0 (float32 x 1, SUM)", "timed out after"});
      }
      barrier();  // rank 1 keeps the group, connected and silent, until rank 0's op has failed
    }
    destroy_process_group();
      },
      {.env = {{"DDP_SHM", "0"}}});
}

TEST(Failures, WaitWithATimeoutSaysWhoIsLateAndTheOpGoesOn) {
  test::run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    std::int64_t x = rank + 1;
    if (rank == 1) std::this_thread::sleep_for(1500ms);
    auto work = group->all_reduce(buffer_of(&x, 1));
    if (rank == 0) {
      expect_error<TimeoutError>([&] { work->wait(300ms); },
                                 {"all_reduce #0", "did not finish within 300 ms", "had not reached", "rank 1"});
    }
    work->wait();
    EXPECT_EQ(x, 3);
    destroy_process_group();
  });
}

// DDP_DEBUG=1, for one group.
std::map<std::string, std::string> debug() { return {{"DDP_DEBUG", "1"}}; }

TEST(Failures, MismatchedCollectivesAreReportedInDebugMode) {
  test::run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 20s, .variables = debug()});
    auto group = get_default_group();
    float x[20] = {};
    std::string message;
    if (rank == 0) {
      message = expect_error<MismatchError>([&] { group->all_reduce(buffer_of(x, 10))->wait(); }, {});
    } else {
      message = expect_error<MismatchError>([&] { group->broadcast(buffer_of(x, 10), 0)->wait(); }, {});
    }
    EXPECT_NE(message.find("rank 0 called all_reduce #0 (float32 x 10, SUM)"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1 called broadcast #0 (float32 x 10, root 0)"), std::string::npos) << message;
  });
  test::run_ranks(2, [](int rank, int) {  // same op, different sizes
    init_process_group("gloo", {.timeout = 20s, .variables = debug()});
    float x[20] = {};
    expect_error<MismatchError>(
        [&] { get_default_group()->all_reduce(buffer_of(x, rank == 0 ? 10 : 20))->wait(); },
        {"rank 0 called all_reduce #0 (float32 x 10, SUM)", "rank 1 called all_reduce #0 (float32 x 20, SUM)"});
  });
  test::run_ranks(2, [](int rank, int) {  // same op and size, different types
    init_process_group("gloo", {.timeout = 20s, .variables = debug()});
    double x[4] = {};
    Buffer b = buffer_of(x, 4);
    if (rank == 1) b = Buffer{x, 4, DataType::Int64};
    expect_error<MismatchError>([&] { get_default_group()->all_reduce(b)->wait(); },
                                {"(float64 x 4, SUM)", "(int64 x 4, SUM)"});
  });
}

TEST(Failures, TheStoreHostDyingIsNamedNotAHang) {
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 20s});
    auto group = get_default_group();
    float x = 1;
    group->all_reduce(buffer_of(&x, 1))->wait();
    if (rank == 0) ::raise(SIGKILL);
    const auto start = Clock::now();
    expect_error<Error>([&] { group->all_reduce(buffer_of(&x, 1))->wait(); },
                        {"all_reduce #1", "rank 0, or the launcher"});
    EXPECT_LT(Clock::now() - start, 10s);
      },
      {.killed = {0}});
}

}  // namespace
}  // namespace ddp
