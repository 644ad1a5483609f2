// ms_until (util/deadline.h): the milliseconds a wait may take so that it ends at or after a deadline.
#include "util/deadline.h"

#include <gtest/gtest.h>

namespace ddp::detail {
namespace {

using namespace std::chrono_literals;

TEST(Deadline, TheTimeLeftIsRoundedUpSoAWaitNeverEndsBeforeTheDeadline) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(ms_until(now + 4999700us, now), 5000ms);
  EXPECT_EQ(ms_until(now + 5000ms, now), 5000ms);
  EXPECT_EQ(ms_until(now + 5000000001ns, now), 5001ms);
  EXPECT_GE(now + ms_until(now + 123456us, now), now + 123456us);
}

TEST(Deadline, APassedOrNearDeadlineStillGivesOneMillisecond) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(ms_until(now, now), 1ms);
  EXPECT_EQ(ms_until(now + 10us, now), 1ms);
  EXPECT_EQ(ms_until(now - 3s, now), 1ms);  // Gloo reads 0 as "no timeout"
}

}  // namespace
}  // namespace ddp::detail
