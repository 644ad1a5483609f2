// Joining a group (group/membership.h): a rank whose backend cannot run on its machine tells the others
// at once, instead of leaving them to wait for it until their timeout. Here rank 1 asks for nccl
// on a machine (or build) without a GPU for it, the way a rank whose LOCAL_RANK names a GPU it
// cannot see does on a GPU machine (NcclFailures.TwoRanksOnOneGpuAreToldWhy).
#include <gtest/gtest.h>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(GroupMembership, ARankThatCannotRunItsBackendIsNamedByTheOthersAtOnce) {
  test::run_ranks(2, [](int rank, int) {
    const auto start = Clock::now();
    if (rank == 1) {
      EXPECT_THROW(init_process_group("nccl", {.timeout = 60s}), Error);
    } else {
      const auto message = test::expect_error<Error>(
          [] { init_process_group("gloo", {.timeout = 60s}); },
          {"init_process_group", "rank 1 (pid ", "cannot take part in group 'world'", "nccl"});
      EXPECT_EQ(message.find("did not join"), std::string::npos) << message;
    }
    EXPECT_LT(Clock::now() - start, 20s) << "the timeout is 60 s";
    EXPECT_FALSE(is_initialized());
  });
}

}  // namespace
}  // namespace ddp
