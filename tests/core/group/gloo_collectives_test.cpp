// The collective suite over real processes on the gloo backend, world sizes 1 to 5.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "collective_suite.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, EveryOpTypeAndSizeMatchesTheReference) {
  test::run_ranks(
      GetParam(),
      [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    ASSERT_EQ(get_rank(), rank);
    ASSERT_EQ(get_world_size(), world);
    test::run_collective_suite(*get_default_group());
    destroy_process_group();
      },
      {.deadline = 170s});
}

TEST_P(GlooWorld, AThousandBackToBackAsyncOps) {
  test::run_ranks(GetParam(), [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    test::run_async_burst(*get_default_group(), 1000);
    destroy_process_group();
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooWorld, ::testing::Values(1, 2, 3, 4, 5),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Over TCP alone (DDP_SHM=0): all_reduces up to DDP_GLOO_DOUBLING_BYTES by recursive doubling,
// larger ones (the suite's 1 MB run) by Gloo's ring; and the ring at every size.
class GlooTcpWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooTcpWorld, EveryOpTypeAndSizeMatchesTheReference) {
  test::run_ranks(
      GetParam(),
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    test::run_collective_suite(*get_default_group(), {.large_bytes = 1u << 20});
    destroy_process_group();
      },
      {.deadline = 170s, .env = {{"DDP_SHM", "0"}}});
}

TEST_P(GlooTcpWorld, TheRingAtEverySize) {
  test::run_ranks(
      GetParam(),
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    test::run_collective_suite(*get_default_group(), {.large_bytes = 0});
    destroy_process_group();
      },
      {.deadline = 170s, .env = {{"DDP_SHM", "0"}, {"DDP_GLOO_DOUBLING_BYTES", "0"}}});
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooTcpWorld, ::testing::Values(2, 3, 4, 5, 6),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Ranks that took different paths would wait for each other until the timeout: rank 0's threshold
// holds. And whatever the path, every rank gets the same bits of a float sum whose order matters.
TEST(GlooTcp, RankZerosDoublingThresholdHoldsAndEveryRankGetsTheSameBits) {
  test::run_ranks(
      5,
      [](int rank, int world) {
    init_process_group("gloo", {.timeout = 20s});
    auto group = get_default_group();
    for (std::size_t count : {std::size_t{1000}, std::size_t{300000}}) {  // 4 KB, 1.2 MB
      std::vector<float> data(count);
      for (std::size_t i = 0; i < count; ++i)
        data[i] = 0.1f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>(i % 97);
      group->all_reduce(buffer_of(data.data(), count))->wait();
      std::vector<float> all(count * static_cast<std::size_t>(world));
      group->all_gather(buffer_of(data.data(), count), buffer_of(all.data(), all.size()))->wait();
      for (int r = 1; r < world; ++r) {
        EXPECT_EQ(std::memcmp(all.data() + r * count, all.data(), count * sizeof(float)), 0)
            << "rank " << r << ", " << count;
      }
      EXPECT_NEAR(data[0], 1.5f, 1e-5f);
    }
    destroy_process_group();
      },
      {.deadline = 120s, .env = {{"DDP_SHM", "0"}}, .rank_env = [](int rank) {
         return std::map<std::string, std::string>{{"DDP_GLOO_DOUBLING_BYTES", rank == 1   ? "0"
                                                                               : rank == 2 ? "4000000"
                                                                                           : "65536"}};
       }});
}

TEST(GlooGroups, TwoGroupsUsedAtOnceFromTwoThreads) {
  test::run_ranks(3, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto other = new_group({0, 1, 2});
    ASSERT_TRUE(other);
    std::thread a([&] { test::run_async_burst(*get_default_group(), 300); });
    std::thread b([&] { test::run_async_burst(*other, 300); });
    a.join();
    b.join();
    destroy_process_group();
  });
}

TEST(GlooGroups, SubgroupsRunOnTheirMembersOnly) {
  test::run_ranks(5, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto evens = new_group({4, 0, 2});  // any order: ranks are sorted, as in PyTorch
    auto pair = new_group({1, 3});
    auto solo = new_group({4});
    if (rank % 2 == 0) {
      ASSERT_TRUE(evens);
      EXPECT_FALSE(pair);
      EXPECT_EQ(evens->size(), 3);
      EXPECT_EQ(evens->rank(), rank / 2);
      EXPECT_EQ(evens->global_rank(evens->rank()), rank);
      std::int64_t value = rank;
      evens->all_reduce(buffer_of(&value, 1))->wait();
      EXPECT_EQ(value, 0 + 2 + 4);
      test::run_collective_suite(*evens, {.sizes = {0, 5}, .large_bytes = 0});
    } else {
      ASSERT_TRUE(pair);
      EXPECT_FALSE(evens);
      std::int64_t value = rank;
      pair->all_reduce(buffer_of(&value, 1), ReduceOp::MAX)->wait();
      EXPECT_EQ(value, 3);
    }
    EXPECT_EQ(static_cast<bool>(solo), rank == 4);
    if (solo) {
      double x = 2.5;
      solo->all_reduce(buffer_of(&x, 1))->wait();
      EXPECT_EQ(x, 2.5);
    }
    barrier();
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp
