// Wakeup (util/wakeup.h): the sleep the nccl backend's waits take, cut short by CUDA's host function.
#include "util/wakeup.h"

#include <gtest/gtest.h>

#include <thread>

namespace ddp::detail {
namespace {

using namespace std::chrono_literals;

TEST(Wakeup, ASleepWithoutANotifyRunsItsCourseAndSaysSo) {
  Wakeup wakeup;
  EXPECT_FALSE(wakeup.sleep_for(2ms));
  EXPECT_FALSE(wakeup.notified());
}

TEST(Wakeup, ANotifyBeforeTheSleepMakesEverySleepReturnAtOnce) {
  Wakeup wakeup;
  wakeup.notify();
  EXPECT_TRUE(wakeup.notified());
  EXPECT_TRUE(wakeup.sleep_for(30s));  // false, 30 s later, if the earlier notify were lost
  EXPECT_TRUE(wakeup.sleep_for(30s));
}

TEST(Wakeup, ANotifyFromAnotherThreadEndsASleepInProgress) {
  Wakeup wakeup;
  std::thread notifier([&] {
    std::this_thread::sleep_for(20ms);
    wakeup.notify();
  });
  EXPECT_TRUE(wakeup.sleep_for(30s));  // false, 30 s later, if the wakeup were lost
  notifier.join();
}

}  // namespace
}  // namespace ddp::detail
