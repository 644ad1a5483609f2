// The readiness bookkeeping: buckets launch only in bucket order, each once per iteration.
#include <gtest/gtest.h>

#include "reducer/readiness.h"

namespace ddp::detail {
namespace {

TEST(Readiness, LaunchesBucketsOnlyInOrder) {
  Readiness r({{3, 2}, {1}, {0}}, 4);
  EXPECT_TRUE(r.mark_ready(1).empty());  // bucket 1 complete, but bucket 0 is not
  EXPECT_TRUE(r.mark_ready(3).empty());
  EXPECT_EQ(r.mark_ready(2), (std::vector<std::size_t>{0, 1}));  // 0 completes, 1 follows
  EXPECT_EQ(r.unready(), (std::vector<std::size_t>{0}));
  EXPECT_TRUE(r.mark_ready(2).empty());  // twice: nothing launches again, nothing is listed again
  EXPECT_EQ(r.mark_ready(0), (std::vector<std::size_t>{2}));
  EXPECT_TRUE(r.unready().empty());
  EXPECT_TRUE(r.mark_ready(0).empty());  // every bucket launched: none again
  EXPECT_EQ(r.ready_order(), (std::vector<std::size_t>{1, 3, 2, 0}));
}

TEST(Readiness, ResetStartsANewIteration) {
  Readiness r({{1, 0}}, 2);
  r.mark_ready(1);
  EXPECT_EQ(r.mark_ready(0), (std::vector<std::size_t>{0}));
  r.reset();
  EXPECT_EQ(r.unready(), (std::vector<std::size_t>{1, 0}));
  EXPECT_TRUE(r.ready_order().empty());
  EXPECT_TRUE(r.mark_ready(0).empty());
  EXPECT_EQ(r.mark_ready(1), (std::vector<std::size_t>{0}));  // the bucket launches again
  EXPECT_EQ(r.ready_order(), (std::vector<std::size_t>{0, 1}));
}

}  // namespace
}  // namespace ddp::detail
