// issue_and_wait: a blocking collective runs on its caller's thread (the group's worker is not
// woken for it), in issue order, with the same results and errors as on the worker; and the
// worker's run_here/post-without-wake-up that it is built on.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <future>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "group/worker.h"
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
  auto worker = std::make_unique<detail::Worker>("test", std::chrono::hours(1));
  while (!worker->waiting()) std::this_thread::yield();
  return worker;
}

TEST(Worker, RunHereRunsOnlyTheNextTaskOnTheCallersThreadAndKeepsTheOrder) {
  auto sleeping = sleeping_worker();
  auto& worker = *sleeping;
  std::vector<int> order;
  std::thread::id ran_on;
  std::promise<void> b_ran;
  const auto a = worker.post([&] { order.push_back(1); ran_on = std::this_thread::get_id(); }, /*wake=*/false);
  const auto b = worker.post([&] { order.push_back(2); b_ran.set_value(); }, /*wake=*/false);
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

TEST(Worker, ATaskPostedWithoutAWakeUpIsNotLeftBehind) {
  detail::Worker worker("test");
  std::promise<void> ran;
  const auto start = Clock::now();
  worker.post([&] { ran.set_value(); }, /*wake=*/false);  // and nobody runs it here
  ASSERT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_LT(Clock::now() - start, 1s) << "the idle worker checks its queue every " << detail::Worker::kIdleCheck.count()
                                      << " ms";
}

TEST(Worker, StopWaitsForATaskRunningOnACallersThreadThenDrains) {
  auto sleeping = sleeping_worker();
  auto& worker = *sleeping;
  std::atomic<int> done{0};
  std::promise<void> started;
  const auto t = worker.post([&] {
    started.set_value();
    std::this_thread::sleep_for(200ms);
    done = 1;
  }, /*wake=*/false);
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
    issue_and_wait([&] {
      auto work = group->all_reduce(buffer_of(data.data(), data.size()));
      work->then([&](Work&) { finished_on = std::this_thread::get_id(); });
      return work;
    });
    ASSERT_EQ(data.front(), expected_sum(world));
    ASSERT_EQ(data.back(), expected_sum(world));
    here += finished_on == std::this_thread::get_id();
  }
  // Only the worker's idle check (every 20 ms) can take one first, in the microseconds between
  // the post and the run.
  EXPECT_GE(here, kOps - 5) << "ran on the caller's thread " << here << " times of " << kOps;
  destroy_process_group();
}

TEST(IssueAndWait, RunsTheCollectiveOnTheCallersThreadOverSharedMemory) { test::run_ranks(3, check_runs_on_callers_thread); }

TEST(IssueAndWait, RunsTheCollectiveOnTheCallersThreadOverGlooTcp) {
  test::run_ranks(2, check_runs_on_callers_thread, {.env = {{"DDP_SHM", "0"}}});
}

TEST(IssueAndWait, WaitsBehindQueuedAsyncOpsInIssueOrder) {
  test::run_ranks(3, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    std::vector<std::vector<float>> queued(8, std::vector<float>(1 << 18, static_cast<float>(rank + 1)));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& q : queued) works.push_back(group->all_reduce(buffer_of(q.data(), q.size())));
    std::int64_t x = rank + 1;
    issue_and_wait([&] { return group->all_reduce(buffer_of(&x, 1), ReduceOp::MAX); });
    EXPECT_EQ(x, world);
    for (auto& w : works) EXPECT_TRUE(w->is_completed()) << "an op issued earlier finished after a later one";
    for (auto& q : queued) EXPECT_EQ(q[12345], expected_sum(world));
    destroy_process_group();
  });
}

TEST(IssueAndWait, AnIssuerThatThrowsOrWaitsItselfLeavesNothingStuck) {
  test::run_ranks(2, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    float x = rank + 1;
    std::shared_ptr<Work> posted;
    EXPECT_THROW(issue_and_wait([&]() -> std::shared_ptr<Work> {
                   posted = group->all_reduce(buffer_of(&x, 1));
                   throw std::runtime_error("the issuing code failed after issuing");
                 }),
                 std::runtime_error);
    auto start = Clock::now();
    posted->wait();  // handed to the worker when the issuer threw
    EXPECT_EQ(x, expected_sum(world));
    EXPECT_LT(Clock::now() - start, 5s);

    start = Clock::now();
    issue_and_wait([&] {
      auto work = group->all_reduce(buffer_of(&x, 1));
      work->wait();  // not what issue_and_wait expects, but the idle worker finds the op
      return work;
    });
    EXPECT_EQ(x, 2 * expected_sum(world));
    EXPECT_LT(Clock::now() - start, 5s);

    expect_error<InvalidArgument>([&] { issue_and_wait([] { return std::shared_ptr<Work>(); }); }, {"no Work"});
    destroy_process_group();
  });
}

TEST(IssueAndWait, APeerKilledBeforeTheOpIsNamedByTheRankRunningItOnItsOwnThread) {
  auto results = test::run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    float x = 1;
    issue_and_wait([&] { return group->all_reduce(buffer_of(&x, 1)); });
    if (rank == 1) ::raise(SIGKILL);
    const auto start = Clock::now();
    expect_error<PeerLostError>([&] { issue_and_wait([&] { return group->all_reduce(buffer_of(&x, 1)); }); },
                                {"all_reduce #1", "group 'world'", "Lost rank 1"});
    EXPECT_LT(Clock::now() - start, 15s) << "the timeout is 30 s";
  }, {.expect_success = false});
  if (test::is_rank_process()) return;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << results[0].output;
  EXPECT_EQ(results[1].signal, SIGKILL);
}

}  // namespace
}  // namespace ddp
