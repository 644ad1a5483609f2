// ddp::Future: holds the tensor its work writes into, yields it (or a continuation's value on
// it) once the work is done, and carries the work's error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "ddp/ddp.h"
#include "support/expect_error.h"

namespace ddp::test {
namespace {

TEST(Future, YieldsTheTensorItHoldsOnceTheWorkIsDone) {
  auto work = std::make_shared<Work>("test op");
  std::shared_ptr<Future> future;
  const void* data = nullptr;
  {
    at::Tensor buffer = torch::ones({4});
    data = buffer.data_ptr();
    future = std::make_shared<Future>(work, buffer);
  }  // the future's tensor is the only one left
  EXPECT_FALSE(future->is_completed());
  std::thread finisher([&] { work->finish(); });
  at::Tensor value = future->wait();
  finisher.join();
  EXPECT_TRUE(future->is_completed());
  EXPECT_EQ(value.data_ptr(), data);
  EXPECT_TRUE(at::equal(value, torch::ones({4})));
}

TEST(Future, TheContinuationReceivesTheHeldTensorAndRunsOnce) {
  auto work = std::make_shared<Work>("test op");
  int runs = 0;
  auto future = std::make_shared<Future>(work, torch::full({2}, 3.0f), [&runs](at::Tensor t) {
    ++runs;
    return t * 2;
  });
  work->finish();
  EXPECT_TRUE(at::equal(future->wait(), torch::full({2}, 6.0f)));
  EXPECT_TRUE(at::equal(future->wait(), torch::full({2}, 6.0f)));
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(at::equal(Future::completed(torch::ones({1}))->wait(), torch::ones({1})));
}

TEST(Future, TheWorksErrorIsRethrownAndTheContinuationDoesNotRun) {
  auto work = std::make_shared<Work>("all_reduce #3 in group 'world'");
  bool ran = false;
  Future future(work, torch::ones({1}), [&ran](at::Tensor t) {
    ran = true;
    return t;
  });
  work->finish(std::make_exception_ptr(TimeoutError("all_reduce #3 in group 'world' timed out")));
  expect_error<TimeoutError>([&] { future.wait(); }, {"all_reduce #3", "timed out"});
  EXPECT_FALSE(ran);
}

TEST(Future, ANullWorkOrEmptyContinuationIsRejected) {
  expect_error<InvalidArgument>([] { Future f(nullptr, torch::ones({1})); }, {"Future: the work is null"});
  expect_error<InvalidArgument>([] { Future f(Work::completed("done"), torch::ones({1}), {}); },
                                {"Future: the continuation is empty", "Future(work, tensor)"});
}

}  // namespace
}  // namespace ddp::test
