// Tensor collectives on CUDA tensors: on nccl (a group of one on any GPU machine, one process per
// GPU when there are several), staged through host memory on gloo (several ranks on one GPU),
// and ordered after the work of the stream that issued them.
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cuda_support.h"
#include "ddp/ddp.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// Every tensor collective on `device`, checked against values every rank can compute.
void check_every_collective(const torch::Device& device) {
  const int rank = get_rank(), world = get_world_size();
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto value = [&](int r) { return torch::arange(4, opts) + 10 * r; };  // rank r's input
  {
    auto t = value(rank);
    all_reduce(t);
    auto want = torch::zeros({4}, opts);
    for (int r = 0; r < world; ++r) want += value(r);
    EXPECT_TRUE(torch::equal(t, want)) << "all_reduce";
    auto half = value(rank).to(torch::kHalf);
    all_reduce(half, ReduceOp::MAX);
    EXPECT_TRUE(torch::equal(half, value(world - 1).to(torch::kHalf))) << "all_reduce MAX half";
  }
  {
    auto t = value(rank);
    broadcast(t, world - 1);
    EXPECT_TRUE(torch::equal(t, value(world - 1))) << "broadcast";
  }
  {
    std::vector<torch::Tensor> outs;
    for (int r = 0; r < world; ++r) outs.push_back(torch::full({4}, -1.0f, opts));
    all_gather(outs, value(rank));
    for (int r = 0; r < world; ++r) EXPECT_TRUE(torch::equal(outs[r], value(r))) << "all_gather " << r;
    auto flat = torch::empty({4 * world}, opts);
    all_gather_into_tensor(flat, value(rank));
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(torch::equal(flat.narrow(0, 4 * r, 4), value(r))) << "all_gather_into_tensor";
  }
  {
    std::vector<torch::Tensor> ins;
    for (int r = 0; r < world; ++r) ins.push_back(value(rank) * (r + 1));
    auto out = torch::empty({4}, opts);
    reduce_scatter(out, ins);
    auto want = torch::zeros({4}, opts);
    for (int r = 0; r < world; ++r) want += value(r) * (rank + 1);
    EXPECT_TRUE(torch::equal(out, want)) << "reduce_scatter";
  }
  {
    std::vector<torch::Tensor> ins, outs;
    for (int r = 0; r < world; ++r) {
      ins.push_back(value(rank) + 100 * r);
      outs.push_back(torch::empty({4}, opts));
    }
    all_to_all(outs, ins);
    for (int r = 0; r < world; ++r) EXPECT_TRUE(torch::equal(outs[r], value(r) + 100 * rank)) << "all_to_all " << r;
  }
  {
    std::vector<torch::Tensor> list;
    if (rank == 0)
      for (int r = 0; r < world; ++r) list.push_back(torch::empty({4}, opts));
    gather(value(rank), list, 0);
    if (rank == 0) {
      for (int r = 0; r < world; ++r) EXPECT_TRUE(torch::equal(list[r], value(r))) << "gather " << r;
    }
    std::vector<torch::Tensor> parts;
    if (rank == 0)
      for (int r = 0; r < world; ++r) parts.push_back(value(r) * 2);
    auto mine = torch::empty({4}, opts);
    scatter(mine, parts, 0);
    EXPECT_TRUE(torch::equal(mine, value(rank) * 2)) << "scatter";
  }
  if (world > 1) {
    auto out = value(rank), in = torch::empty({4}, opts);
    auto sent = isend(out, (rank + 1) % world);
    auto got = irecv(in, (rank + world - 1) % world);
    sent->wait();
    got->wait();
    EXPECT_TRUE(torch::equal(in, value((rank + world - 1) % world))) << "send/recv";
  }
  barrier();
}

// On a side stream, a slow kernel and then the input's producer; the collective is issued at
// once and must see the produced values. (Without the `ready` event the group of one's copy,
// ordered after the legacy default stream only, would read the input too early.)
void check_waits_for_the_current_stream(const torch::Device& device) {
  const int world = get_world_size();
  auto stream = c10::cuda::getStreamFromPool(false, device.index());
  c10::cuda::CUDAStreamGuard guard(stream);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto x = torch::zeros({1 << 16}, opts);
  at::cuda::sleep(200 * 1000 * 1000);  // ~0.1 s or more of GPU time, on `stream`
  x.add_(1);
  auto out = torch::empty({(1 << 16) * world}, opts);
  all_gather_into_tensor(out, x);
  EXPECT_EQ(out.min().item<float>(), 1.0f) << "the op read its input before the producing stream wrote it";
  all_reduce(x);
  EXPECT_EQ(x.max().item<float>(), static_cast<float>(world));
}

TEST(CudaCollectives, EveryCollectiveOnAGroupOfOneOnNccl) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  init_process_group("nccl", {.world_size = 1, .rank = 0});
  check_every_collective(torch::Device(torch::kCUDA, 0));
  check_waits_for_the_current_stream(torch::Device(torch::kCUDA, 0));
  destroy_process_group();
}

class CudaThroughGloo : public ::testing::TestWithParam<int> {};

TEST_P(CudaThroughGloo, SeveralRanksShareOneGpu) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  test::run_ranks(
      GetParam(),
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    check_every_collective(torch::Device(torch::kCUDA, 0));
    check_waits_for_the_current_stream(torch::Device(torch::kCUDA, 0));
    destroy_process_group();
      },
      {.deadline = 120s});
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaThroughGloo, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(CudaCollectives, OneProcessPerGpuOnNccl) {
  DDP_REQUIRE_CUDA_DEVICES(2);
  const int world = static_cast<int>(torch::cuda::device_count());
  test::run_ranks(
      world,
      [](int rank, int) {
    init_process_group("nccl", {.timeout = 60s});
    const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(get_local_rank()));
    check_every_collective(device);
    check_waits_for_the_current_stream(device);
    destroy_process_group();
      },
      {.deadline = 120s});
}

TEST(CudaCollectives, CpuTensorsOnNcclAreRefusedClearly) {
  DDP_REQUIRE_CUDA_DEVICES(2);
  test::run_ranks(2, [](int, int) {
    init_process_group("nccl", {.timeout = 60s});
    auto t = torch::ones({2});
    try {
      all_reduce(t);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("the nccl backend cannot use buffers on cpu"), std::string::npos)
          << e.what();
    }
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp
