// wakeup_when_reached (nccl/stream_wakeup.h): CUDA's host function ends the nccl waits' sleeps
// when the stream gets there, so a collective's end is seen at once, not at the next 1 ms poll.
#include "nccl/stream_wakeup.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "ddp/hash_store.h"
#include "gpu_support.h"
#include "nccl/nccl_backend.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Holds a stream on the host until released: a host function that waits for the flag.
struct HeldStream {
  HeldStream() {
    test::cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    test::cuda_check(cudaLaunchHostFunc(
                         stream,
                         [](void* flag) {
      while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
                         },
                         &released),
                     "cudaLaunchHostFunc");
  }
  ~HeldStream() {
    released = true;
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  std::atomic<bool> released{false};
  cudaStream_t stream = nullptr;
};

TEST(StreamWakeup, IsNotifiedOnlyOnceTheStreamHasPassedTheWorkBeforeIt) {
  DDP_REQUIRE_GPUS(1);
  HeldStream held;
  const auto wakeup = detail::wakeup_when_reached(held.stream);
  ASSERT_TRUE(wakeup) << "CUDA refused the host function";
  EXPECT_FALSE(wakeup->sleep_for(50ms));  // the stream is held before it
  held.released = true;
  EXPECT_TRUE(wakeup->sleep_for(30s));
}

// A collective whose input is not ready for a while: the worker's wait has backed off to 1 ms
// sleeps by the time the producer's stream is released. How late its end is seen is printed
// (a timing, so not a verdict): without the wakeup it was up to 1 ms.
TEST(StreamWakeup, ACollectiveThatWaitedLongIsSeenDoneSoonAfterTheDevice) {
  DDP_REQUIRE_GPUS(1);
  ::unsetenv("LOCAL_RANK");
  test::cuda_check(cudaSetDevice(0), "cudaSetDevice");
  auto backend = detail::make_nccl_backend(BackendContext{std::make_shared<HashStore>(), 0, 1, 60s, ""});
  float* data = nullptr;
  test::cuda_check(cudaMalloc(&data, 1024 * sizeof(float)), "cudaMalloc");
  std::vector<double> lags;
  for (int round = 0; round < 5; ++round) {
    HeldStream held;
    cudaEvent_t ready;
    test::cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    test::cuda_check(cudaEventRecord(ready, held.stream), "cudaEventRecord");
    Buffer buffer{data, 1024, DataType::Float32, Device{Device::Type::CUDA, 0}};
    buffer.ready = ready;
    std::thread op([&] { backend->all_reduce(buffer, ReduceOp::SUM, Clock::now() + 60s); });
    std::this_thread::sleep_for(30ms);
    const auto released = Clock::now();
    held.released = true;
    op.join();
    lags.push_back(std::chrono::duration<double, std::micro>(Clock::now() - released).count());
    cudaEventDestroy(ready);
  }
  std::sort(lags.begin(), lags.end());
  std::printf(
      "[ info ] a one-rank all_reduce that waited 30 ms for its input: done %.0f us after the release "
      "(median of %zu)\n",
      lags[lags.size() / 2], lags.size());
  cudaFree(data);
}

}  // namespace
}  // namespace ddp
