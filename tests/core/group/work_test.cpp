// ddp::Work's description: a group's operations name themselves only when something asks (an
// error, a timed-out wait, a log line), once, and the name is the same as an eager one.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using test::expect_error;

TEST(Work, ALazyDescriptionIsBuiltOnlyWhenAskedForAndOnlyOnce) {
  std::atomic<int> built{0};
  Work work([&] {
    ++built;
    return std::string("all_reduce #7 in group 'world'");
  });
  work.finish();
  work.wait();
  EXPECT_EQ(built, 0) << "an operation that succeeded and was never described formatted its name";
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] { EXPECT_EQ(work.description(), "all_reduce #7 in group 'world'"); });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(built, 1);
}

TEST(Work, ATimedOutWaitNamesTheOperationByItsLazyDescription) {
  Work work([] { return std::string("broadcast #3 (float32 x 2, root 1) in group 'g'"); });
  expect_error<TimeoutError>([&] { work.wait(20ms); },
                             {"broadcast #3 (float32 x 2, root 1) in group 'g' did not finish within"});
  work.finish();
}

TEST(Work, AGroupsOperationsAreDescribedAsBefore) {
  test::run_ranks(2, [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    std::vector<float> data(4, 1.0f);
    auto work = get_default_group()->all_reduce(buffer_of(data.data(), data.size()));
    work->wait();
    EXPECT_EQ(work->description(), "all_reduce #0 (float32 x 4, SUM) in group 'world'");
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp
