// Process groups on the nccl backend: a group of one on one GPU, worlds of one process per GPU
// when the machine has several, and what goes wrong: two ranks on one GPU, a late rank, a
// killed rank, CPU buffers, bitwise reductions.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "gpu_support.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::expect_error;

// This rank's GPU, as the backend picks it (LOCAL_RANK).
int my_gpu() {
  const int gpu = get_local_rank();
  test::cuda_check(cudaSetDevice(gpu), "cudaSetDevice");
  return gpu;
}

// 1,000 small all_reduces on device buffers issued without waiting, then checked.
void device_burst(ProcessGroup& group, int gpu, int count) {
  const int rank = group.rank(), world = group.size();
  std::vector<std::int64_t> host(static_cast<std::size_t>(count) * 3);
  for (int k = 0; k < count; ++k) {
    host[k * 3] = k;
    host[k * 3 + 1] = rank;
    host[k * 3 + 2] = 1;
  }
  void* data = nullptr;
  test::cuda_check(cudaMalloc(&data, host.size() * sizeof(std::int64_t)), "cudaMalloc");
  test::cuda_check(cudaMemcpy(data, host.data(), host.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice), "upload");
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < count; ++k) {
    Buffer b{static_cast<std::int64_t*>(data) + k * 3, 3, DataType::Int64, Device{Device::Type::CUDA, gpu}};
    works.push_back(group.all_reduce(b));
  }
  for (auto& w : works) w->wait();
  test::cuda_check(cudaMemcpy(host.data(), data, host.size() * sizeof(std::int64_t), cudaMemcpyDeviceToHost),
                   "download");
  cudaFree(data);
  for (int k = 0; k < count; ++k) {
    ASSERT_EQ(host[k * 3], static_cast<std::int64_t>(k) * world) << "op " << k;
    ASSERT_EQ(host[k * 3 + 1], static_cast<std::int64_t>(world) * (world - 1) / 2) << "op " << k;
    ASSERT_EQ(host[k * 3 + 2], world) << "op " << k;
  }
}

TEST(NcclGroupOfOne, EveryOpOnDeviceBuffersMatchesTheReference) {
  DDP_REQUIRE_GPUS(1);
  init_process_group("nccl", {.world_size = 1, .rank = 0});
  EXPECT_EQ(get_backend(), "nccl");
  test::CudaMemory memory(0);
  test::run_collective_suite(*get_default_group(),
                             {.sizes = {0, 1, 13, 1009}, .large_bytes = 4u << 20, .memory = &memory});
  device_burst(*get_default_group(), 0, 200);
  destroy_process_group();
}

TEST(NcclGroupOfOne, NoBackendNamedPicksNccl) {
  DDP_REQUIRE_GPUS(1);
  init_process_group("", {.world_size = 1, .rank = 0});
  EXPECT_EQ(get_backend(), "nccl");
  destroy_process_group();
}

// One process per GPU: world sizes 2 and every GPU of the machine.
class NcclWorld : public ::testing::TestWithParam<int> {};

TEST_P(NcclWorld, EveryOpOnDeviceBuffersMatchesTheReference) {
  const int world = GetParam() == 0 ? test::gpu_count() : GetParam();
  DDP_REQUIRE_GPUS(std::max(world, 2));
  test::run_ranks(
      world,
      [](int rank, int world) {
    init_process_group("nccl", {.timeout = 120s});
    const int gpu = my_gpu();
    EXPECT_EQ(gpu, rank);
    test::CudaMemory memory(gpu);
    // Bitwise reductions are not NCCL's (tested below); AVG of floats multiplies by 1/world before
    // summing, exact for the small integers of the suite when the world is a power of two.
    test::run_collective_suite(*get_default_group(), {.memory = &memory, .bitwise = false});
    device_burst(*get_default_group(), gpu, 1000);
    destroy_process_group();
      },
      {.deadline = 280s});
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, NcclWorld, ::testing::Values(2, 0), [](const auto& info) {
  return info.param == 0 ? std::string("every_gpu") : "world" + std::to_string(info.param);
});

TEST(NcclWorlds, LargeSendsBothWaysAtOnceDoNotDeadlock) {
  DDP_REQUIRE_GPUS(2);
  test::run_ranks(2, [](int rank, int) {
    init_process_group("nccl", {.timeout = 60s});
    const int gpu = my_gpu();
    const std::size_t n = 64u << 20;  // 256 MB of float32 each way: far beyond NCCL's buffers
    void *out = nullptr, *in = nullptr;
    test::cuda_check(cudaMalloc(&out, n * 4), "cudaMalloc");
    test::cuda_check(cudaMalloc(&in, n * 4), "cudaMalloc");
    test::cuda_check(cudaMemset(out, rank + 1, n * 4), "cudaMemset");
    auto group = get_default_group();
    const Device d{Device::Type::CUDA, gpu};
    for (int round = 0; round < 3; ++round) {
      auto sent = group->send(Buffer{out, n, DataType::Float32, d}, 1 - rank);
      auto got = group->recv(Buffer{in, n, DataType::Float32, d}, 1 - rank);
      sent->wait();
      got->wait();
    }
    unsigned char first = 0;
    test::cuda_check(cudaMemcpy(&first, in, 1, cudaMemcpyDeviceToHost), "download");
    EXPECT_EQ(first, 2 - rank);
    cudaFree(out);
    cudaFree(in);
    destroy_process_group();
  });
}

TEST(NcclWorlds, TheDebugAgreementCheckWorksOnNccl) {
  DDP_REQUIRE_GPUS(2);
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("nccl", {.timeout = 30s});
    const int gpu = my_gpu();
    float* x = nullptr;
    test::cuda_check(cudaMalloc(&x, 4 * sizeof(float)), "cudaMalloc");
    const Device d{Device::Type::CUDA, gpu};
    get_default_group()->all_reduce(Buffer{x, 4, DataType::Float32, d})->wait();  // agreed
    expect_error<MismatchError>(
        [&] {
      get_default_group()->all_reduce(Buffer{x, rank == 0 ? 4u : 3u, DataType::Float32, d})->wait();
        },
        {"ranks called different collectives at sequence number 1", "rank 0 called all_reduce #1 (float32 x 4, SUM)",
         "rank 1 called all_reduce #1 (float32 x 3, SUM)"});
    cudaFree(x);
    destroy_process_group();
      },
      {.env = {{"DDP_DEBUG", "1"}}});
}

TEST(NcclWorlds, CpuBuffersBitwiseOpsAndOtherGpusAreRefusedClearly) {
  DDP_REQUIRE_GPUS(2);
  test::run_ranks(2, [](int rank, int) {
    init_process_group("nccl", {.timeout = 30s});
    const int gpu = my_gpu();
    auto group = get_default_group();
    float host[2] = {};
    expect_error<InvalidArgument>([&] { group->all_reduce(buffer_of(host, 2)); },
                                  {"the nccl backend cannot use buffers on cpu", "gloo"});
    expect_error<InvalidArgument>(
        [&] {
      group->all_reduce(Buffer{host, 2, DataType::Float32, Device{Device::Type::CUDA, 1 - gpu}});
        },
        {"the nccl backend cannot use buffers on cuda:" + std::to_string(1 - gpu), "LOCAL_RANK"});
    std::int32_t* ints = nullptr;
    test::cuda_check(cudaMalloc(&ints, 2 * sizeof(std::int32_t)), "cudaMalloc");
    expect_error<InvalidArgument>(
        [&] {
      group->all_reduce(Buffer{ints, 2, DataType::Int32, Device{Device::Type::CUDA, gpu}}, ReduceOp::BXOR)->wait();
        },
        {"all_reduce #0 (int32 x 2, BXOR)",
         "the nccl backend cannot reduce int32 with BXOR on cuda:" + std::to_string(gpu)});
    // Refused arguments do not break the group.
    group->all_reduce(Buffer{ints, 2, DataType::Int32, Device{Device::Type::CUDA, gpu}}, ReduceOp::MAX)->wait();
    cudaFree(ints);
    destroy_process_group();
  });
}

// One GPU cannot host two NCCL ranks: the second is told so, the first times out saying which
// communicator never came together.
TEST(NcclFailures, TwoRanksOnOneGpuAreToldWhy) {
  DDP_REQUIRE_GPUS(1);
  test::run_ranks(
      2,
      [](int rank, int) {
    if (rank == 1) {
      expect_error<InvalidArgument>([] { init_process_group("nccl", {.timeout = 8s}); },
                                    {"LOCAL_RANK is 1 but this process sees 1 CUDA device", "one GPU per process",
                                     "gloo backend, which can run several ranks on one GPU"});
    } else {  // told at once why rank 1 is not coming
      expect_error<InvalidArgument>([] { init_process_group("nccl", {.timeout = 8s}); },
                                    {"init_process_group", "rank 1 (pid ", "cannot take part in group 'world'",
                                     "LOCAL_RANK is 1 but this process sees 1 CUDA device", "one GPU per process"});
    }
    EXPECT_FALSE(is_initialized());
      },
      {.deadline = 60s, .env = {{"CUDA_VISIBLE_DEVICES", "0"}}});
}

TEST(NcclFailures, ALateRankTimesOutNamingTheOpAndWhereTheOtherWas) {
  DDP_REQUIRE_GPUS(2);
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("nccl", {.timeout = 3s});
    const int gpu = my_gpu();
    float* x = nullptr;
    test::cuda_check(cudaMalloc(&x, sizeof(float)), "cudaMalloc");
    const Buffer b{x, 1, DataType::Float32, Device{Device::Type::CUDA, gpu}};
    auto group = get_default_group();
    group->all_reduce(b)->wait();
    if (rank == 1) {
      std::this_thread::sleep_for(6s);
      EXPECT_THROW(group->all_reduce(b)->wait(), Error);  // rank 0 gave up and said so
      destroy_process_group();
      return;
    }
    const auto start = Clock::now();
    expect_error<TimeoutError>(
        [&] { group->all_reduce(b)->wait(); },
        {"all_reduce #1 (float32 x 1, SUM) in group 'world' on rank 0 timed out", "NCCL had not finished it", "aborted",
         "had not reached all_reduce #1", "rank 1: its last was all_reduce #0"});
    EXPECT_LT(Clock::now() - start, 10s);
    expect_error<TimeoutError>([&] { group->barrier()->wait(); }, {"timed out"});  // the group stays broken
    destroy_process_group();
      },
      {.deadline = 60s});
}

TEST(NcclFailures, AKilledPeerIsNamed) {
  DDP_REQUIRE_GPUS(2);
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("nccl", {.timeout = 10s});
    const int gpu = my_gpu();
    const std::size_t n = 32u << 20;
    float* x = nullptr;
    test::cuda_check(cudaMalloc(&x, n * sizeof(float)), "cudaMalloc");
    const Buffer b{x, n, DataType::Float32, Device{Device::Type::CUDA, gpu}};
    auto group = get_default_group();
    group->all_reduce(Buffer{x, 16, DataType::Float32, b.device})->wait();
    if (rank == 1) ::raise(SIGKILL);
    const auto start = Clock::now();
    expect_error<PeerLostError>([&] { group->all_reduce(b)->wait(); }, {"all_reduce #1", "Lost rank 1"});
    EXPECT_LT(Clock::now() - start, 25s);
    destroy_process_group();
      },
      {.deadline = 90s, .killed = {1}});
}

}  // namespace
}  // namespace ddp
