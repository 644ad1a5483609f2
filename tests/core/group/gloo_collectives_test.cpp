// The collective suite over real processes on the gloo backend, world sizes 1 to 5.
#include <gtest/gtest.h>

#include <thread>

#include "collective_suite.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, EveryOpTypeAndSizeMatchesTheReference) {
  test::run_ranks(GetParam(), [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    ASSERT_EQ(get_rank(), rank);
    ASSERT_EQ(get_world_size(), world);
    test::run_collective_suite(*get_default_group());
    destroy_process_group();
  }, {.deadline = 170s});
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
