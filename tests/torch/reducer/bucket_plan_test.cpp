// The pure parts of DDP: the bucket plan and the readiness bookkeeping.
#include <gtest/gtest.h>

#include "reducer/bucket_plan.h"
#include "reducer/readiness.h"

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

TEST(Readiness, LaunchesBucketsOnlyInOrder) {
  Readiness r({{3, 2}, {1}, {0}}, 4);
  bool first = false;
  EXPECT_TRUE(r.mark_ready(1, first).empty());  // bucket 1 complete, but bucket 0 is not
  EXPECT_TRUE(first);
  EXPECT_TRUE(r.mark_ready(3, first).empty());
  EXPECT_EQ(r.mark_ready(2, first), (std::vector<std::size_t>{0, 1}));  // 0 completes, 1 follows
  EXPECT_EQ(r.unready(), (std::vector<std::size_t>{0}));
  EXPECT_FALSE(r.all_launched());
  EXPECT_TRUE(r.mark_ready(2, first).empty());
  EXPECT_FALSE(first);  // twice
  EXPECT_EQ(r.mark_ready(0, first), (std::vector<std::size_t>{2}));
  EXPECT_TRUE(r.all_launched());
  EXPECT_EQ(r.ready_order(), (std::vector<std::size_t>{1, 3, 2, 0}));
  r.reset();
  EXPECT_EQ(r.unready().size(), 4u);
  EXPECT_FALSE(r.any_ready());
}

}  // namespace
}  // namespace ddp::detail
