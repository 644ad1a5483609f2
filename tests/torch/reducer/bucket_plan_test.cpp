// The bucket plan: which parameters travel together, and the order buckets are rebuilt in.
#include <gtest/gtest.h>

#include "reducer/bucket_plan.h"

namespace ddp::detail {
namespace {

std::vector<ParamSpec> specs(std::vector<std::size_t> bytes, std::vector<int> groups = {}) {
  std::vector<ParamSpec> out;
  for (std::size_t i = 0; i < bytes.size(); ++i) out.push_back({bytes[i], groups.empty() ? 0 : groups[i]});
  return out;
}

TEST(BucketPlan, ReverseOrderFirstBucketSmallThenCap) {
  // 6 parameters of 400 bytes; first cap 500, cap 1000: [5,4] [3,2,1] [0]
  auto plan = plan_buckets(specs({400, 400, 400, 400, 400, 400}), reverse_order(6), 500, 1000);
  EXPECT_EQ(plan, (BucketPlan{{5, 4}, {3, 2, 1}, {0}}));
}

TEST(BucketPlan, TinyCapGivesEachParameterItsOwnBucketAndHugeCapOne) {
  auto tiny = plan_buckets(specs({8, 8, 8}), reverse_order(3), 1, 1);
  EXPECT_EQ(tiny, (BucketPlan{{2}, {1}, {0}}));
  auto huge = plan_buckets(specs({8, 8, 8}), reverse_order(3), 1 << 20, 1 << 30);
  EXPECT_EQ(huge, (BucketPlan{{2, 1, 0}}));
}

TEST(BucketPlan, ALargeParameterClosesItsBucketAlone) {
  auto plan = plan_buckets(specs({10, 5000, 10, 10}), reverse_order(4), 100, 100);
  EXPECT_EQ(plan, (BucketPlan{{3, 2, 1}, {0}}));
}

TEST(BucketPlan, GroupsNeverShareABucketAndBucketsFollowTheOrder) {
  // Parameters alternate between two dtypes; each group fills its own buckets.
  auto plan = plan_buckets(specs({60, 60, 60, 60, 60}, {0, 1, 0, 1, 0}), {4, 3, 2, 1, 0}, 100, 100);
  EXPECT_EQ(plan, (BucketPlan{{4, 2}, {3, 1}, {0}}));
}

TEST(BucketPlan, ObservedOrderIsFollowed) {
  auto plan = plan_buckets(specs({50, 50, 50, 50}), {1, 3, 0, 2}, 100, 100);
  EXPECT_EQ(plan, (BucketPlan{{1, 3}, {0, 2}}));
}

TEST(BucketPlan, TheRebuildOrderIsWhatRankZeroSawThenTheRestReversed) {
  // Broadcast padded with -1; an out-of-range or repeated entry is skipped.
  EXPECT_EQ(observed_order({2, 0, 2, 7, -1, -1}, 5), (std::vector<std::size_t>{2, 0, 4, 3, 1}));
  EXPECT_EQ(observed_order({}, 3), reverse_order(3));
}

}  // namespace
}  // namespace ddp::detail
