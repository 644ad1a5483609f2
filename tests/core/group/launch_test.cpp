// Launch::OnWait: a collective its caller waits for at once runs on the caller's thread (the
// group's worker is not woken for it), in issue order, with the same results and errors as on the
// worker; one nobody waits for is not left behind; and the worker's run_here/post-without-wake-up
// that it is built on, with a worker that sleeps until woken.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <future>
#include <numeric>
#include <thread>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "util/worker.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::expect_error;

// ---- the worker

// A worker that has gone to sleep and will not look at its queue again unless woken.
std::unique_ptr<detail::Worker> sleeping_worker() {
  auto worker = std::make_unique<detail::Worker>("test");
  while (!worker->waiting()) std::this_thread::yield();
  return worker;
}

TEST(Worker, RunHereRunsOnlyTheNextTaskOnTheCallersThreadAndKeepsTheOrder) {
  auto sleeping = sleeping_worker();
  auto& worker = *sleeping;
  std::vector<int> order;
  std::thread::id ran_on;
  std::promise<void> b_ran;
  const auto a = worker.post(
      [&] {
    order.push_back(1);
    ran_on = std::this_thread::get_id();
      },
      /*wake=*/false);
  const auto b = worker.post(
      [&] {
    order.push_back(2);
    b_ran.set_value();
      },
      /*wake=*/false);
  EXPECT_FALSE(worker.run_here(b)) << "b is not next: a is queued before it";
  EXPECT_TRUE(worker.run_here(a));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(worker.run_here(a)) << "a already ran";
  // What is left when a task ran here goes to the worker (it may have been posted for it).
  ASSERT_EQ(b_ran.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(Worker, RunHereRefusesWhileATaskRunsAndTheWorkerRunsItAfter) {
  detail::Worker worker("test");
  std::promise<void> release;
  std::promise<void> started;
  worker.post([&] {
    started.set_value();
    release.get_future().wait();
  });
  started.get_future().wait();
  std::promise<std::thread::id> second;
  const auto t = worker.post([&] { second.set_value(std::this_thread::get_id()); }, /*wake=*/false);
  EXPECT_FALSE(worker.run_here(t)) << "the first task is still running";
  release.set_value();
  worker.wake();
  auto ran_on = second.get_future();
  ASSERT_EQ(ran_on.wait_for(5s), std::future_status::ready);
  EXPECT_NE(ran_on.get(), std::this_thread::get_id());
}

TEST(Worker, SleepsUntilWokenForATaskPostedWithoutAWakeUp) {
  auto sleeping = sleeping_worker();
  auto& worker = *sleeping;
  std::promise<void> ran;
  auto done = ran.get_future();
  worker.post([&] { ran.set_value(); }, /*wake=*/false);  // and nobody runs it here
  EXPECT_EQ(done.wait_for(300ms), std::future_status::timeout) << "the worker polled its queue";
  worker.wake();
  ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
}

TEST(Worker, ATaskPostedWithoutAWakeUpRunsBeforeALaterTaskThatWakesTheWorker) {
  auto sleeping = sleeping_worker();
  auto& worker = *sleeping;
  std::vector<int> order;
  std::promise<void> both;
  worker.post([&] { order.push_back(1); }, /*wake=*/false);
  worker.post([&] {
    order.push_back(2);
    both.set_value();
  });
  ASSERT_EQ(both.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(Worker, StopWaitsForATaskRunningOnACallersThreadThenDrains) {
  auto sleeping = sleeping_worker();
  auto& worker = *sleeping;
  std::atomic<int> done{0};
  std::promise<void> started;
  const auto t = worker.post(
      [&] {
    started.set_value();
    std::this_thread::sleep_for(200ms);
    done = 1;
      },
      /*wake=*/false);
  worker.post([&] { done = done * 10 + 2; }, /*wake=*/false);
  std::thread caller([&] { EXPECT_TRUE(worker.run_here(t)); });
  started.get_future().wait();
  worker.stop();
  EXPECT_EQ(done.load(), 12) << "stop() returned before the caller's task, or did not run the rest after it";
  caller.join();
  const auto late = worker.post([] {}, /*wake=*/false);
  EXPECT_FALSE(worker.run_here(late)) << "a stopped worker runs nothing";
}

// ---- the process group

// Rank r contributes r+1 to every element: the sum is world*(world+1)/2.
float expected_sum(int world) { return static_cast<float>(world * (world + 1) / 2); }

void check_runs_on_callers_thread(int rank, int world) {
  init_process_group("gloo", {.timeout = 60s});
  auto group = get_default_group();
  constexpr int kOps = 50;
  int here = 0;
  for (int i = 0; i < kOps; ++i) {
    std::vector<float> data(1000 + i, static_cast<float>(rank + 1));
    std::thread::id finished_on;
    auto work = group->all_reduce(buffer_of(data.data(), data.size()), ReduceOp::SUM, Launch::OnWait);
    work->then([&](Work&) { finished_on = std::this_thread::get_id(); });
    work->wait();
    ASSERT_EQ(data.front(), expected_sum(world));
    ASSERT_EQ(data.back(), expected_sum(world));
    here += finished_on == std::this_thread::get_id();
  }
  // Nothing wakes the worker for these ops; only a spurious wake-up of its condition variable could.
  EXPECT_GE(here, kOps - 1) << "ran on the caller's thread " << here << " times of " << kOps;
  destroy_process_group();
}

TEST(LaunchOnWait, RunsTheCollectiveOnTheCallersThreadOverSharedMemory) {
  test::run_ranks(3, check_runs_on_callers_thread);
}

TEST(LaunchOnWait, RunsTheCollectiveOnTheCallersThreadOverGlooTcp) {
  test::run_ranks(2, check_runs_on_callers_thread, {.env = {{"DDP_SHM", "0"}}});
}

TEST(LaunchOnWait, AnAsyncOpRunsOnTheWorker) {
  test::run_ranks(2, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    float x = rank + 1;
    std::thread::id finished_on;
    // Rank 1 comes late, so that rank 0's op cannot finish before its callback is registered
    // (a callback registered on a finished op runs at once, on the registering thread).
    if (rank == 1) std::this_thread::sleep_for(300ms);
    auto work = get_default_group()->all_reduce(buffer_of(&x, 1));
    work->then([&](Work&) { finished_on = std::this_thread::get_id(); });
    work->wait();
    EXPECT_EQ(x, expected_sum(world));
    if (rank == 0) {
      EXPECT_NE(finished_on, std::this_thread::get_id());
    }
    destroy_process_group();
  });
}

TEST(LaunchOnWait, WaitsBehindQueuedAsyncOpsInIssueOrder) {
  test::run_ranks(3, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    std::vector<std::vector<float>> queued(8, std::vector<float>(1 << 18, static_cast<float>(rank + 1)));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& q : queued) works.push_back(group->all_reduce(buffer_of(q.data(), q.size())));
    std::int64_t x = rank + 1;
    group->all_reduce(buffer_of(&x, 1), ReduceOp::MAX, Launch::OnWait)->wait();
    EXPECT_EQ(x, world);
    for (auto& w : works) EXPECT_TRUE(w->is_completed()) << "an op issued earlier finished after a later one";
    for (auto& q : queued) EXPECT_EQ(q[12345], expected_sum(world));
    destroy_process_group();
  });
}

TEST(LaunchOnWait, AnOpNobodyWaitsForIsNotLeftBehind) {
  test::run_ranks(2, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    const float sum = expected_sum(world);
    // Polling starts it (on the worker).
    float a = rank + 1;
    auto polled = group->all_reduce(buffer_of(&a, 1), ReduceOp::SUM, Launch::OnWait);
    auto start = Clock::now();
    while (!polled->is_completed()) {
      ASSERT_LT(Clock::now() - start, 10s) << "is_completed() did not start the op";
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_EQ(a, sum);
    // A bounded wait hands it to the worker too.
    float b = rank + 1;
    group->all_reduce(buffer_of(&b, 1), ReduceOp::SUM, Launch::OnWait)->wait(10s);
    EXPECT_EQ(b, sum);
    // One whose Work is dropped runs when a later Async op is issued, before it.
    float c = rank + 1, d = rank + 1;
    group->all_reduce(buffer_of(&c, 1), ReduceOp::SUM, Launch::OnWait).reset();
    group->all_reduce(buffer_of(&d, 1))->wait();
    EXPECT_EQ(c, sum);
    EXPECT_EQ(d, sum);
    // And when the group is destroyed.
    float e = rank + 1;
    group->all_reduce(buffer_of(&e, 1), ReduceOp::SUM, Launch::OnWait).reset();
    group.reset();
    destroy_process_group();
    EXPECT_EQ(e, sum);
  });
}

TEST(LaunchOnWait, APeerKilledBeforeTheOpIsNamedByTheRankRunningItOnItsOwnThread) {
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    float x = 1;
    group->all_reduce(buffer_of(&x, 1), ReduceOp::SUM, Launch::OnWait)->wait();
    if (rank == 1) ::raise(SIGKILL);
    const auto start = Clock::now();
    expect_error<PeerLostError>([&] { group->all_reduce(buffer_of(&x, 1), ReduceOp::SUM, Launch::OnWait)->wait(); },
                                {"all_reduce #1", "group 'world'", "Lost rank 1"});
    EXPECT_LT(Clock::now() - start, 15s) << "the timeout is 30 s";
      },
      {.killed = {1}});
}

}  // namespace
}  // namespace ddp
