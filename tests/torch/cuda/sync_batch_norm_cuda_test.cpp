// SyncBatchNorm on CUDA: ranks sharing one GPU through gloo, and one process per GPU on nccl,
// equal one process running plain BatchNorm on the concatenated batch (as on the CPU:
// tests/torch/sync_batch_norm/sync_batch_norm_test.cpp), uneven and empty shards included; affine
// on and off, contiguous and channels-last, float32 and float16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cuda_support.h"
#include "ddp/ddp.h"
#include "support/multiprocess.h"
#include "sync_batch_norm/one_process_reference.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

void scenarios(int world, const torch::Device& device) {
  std::vector<int> members;
  for (int r = 0; r < world; ++r) members.push_back(r);
  std::vector<std::int64_t> rows{3, 0, 5, 2};
  rows.resize(static_cast<std::size_t>(world), 4);
  const BatchNormScenario plain{1, members, rows, {4, 4}, 3, 0.1};
  expect_matches_one_process<torch::nn::BatchNorm2d>(plain, get_default_group(), 3, device, 1e-4);
  // Affine off, channels-last, and float16 inputs (float32 parameters and statistics, as
  // PyTorch's mixed precision runs batch norm): the CUDA kernels of each.
  auto no_affine = plain, channels_last = plain, half = plain, half_channels_last = plain;
  no_affine.id = 3, no_affine.affine = false;
  channels_last.id = 4, channels_last.channels_last = true;
  half.id = 5, half.dtype = at::kHalf;
  half_channels_last.id = 6, half_channels_last.dtype = at::kHalf, half_channels_last.channels_last = true;
  for (const auto& s : {no_affine, channels_last}) {
    expect_matches_one_process<torch::nn::BatchNorm2d>(s, get_default_group(), 2, device, 1e-4);
  }
  for (const auto& s : {half, half_channels_last}) {  // float16: about 3 significant digits
    expect_matches_one_process<torch::nn::BatchNorm2d>(s, get_default_group(), 2, device, 2e-2);
  }
  expect_matches_one_process<torch::nn::BatchNorm1d>(
      {2, members, std::vector<std::int64_t>(world, 2), {}, 5, c10::nullopt}, get_default_group(), 2, device, 1e-4);
}

TEST(SyncBatchNormCuda, RanksSharingOneGpuThroughGlooEqualOneProcess) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  run_ranks(
      2,
      [](int, int world) {
    init_process_group("gloo", {.timeout = 120s});
    scenarios(world, torch::Device(torch::kCUDA, 0));
    destroy_process_group();
      },
      {.deadline = 280s});
}

TEST(SyncBatchNormCuda, OneProcessPerGpuOnNcclEqualsOneProcess) {
  DDP_REQUIRE_CUDA_DEVICES(2);
  const int world = std::min<int>(static_cast<int>(torch::cuda::device_count()), 4);
  run_ranks(
      world,
      [](int, int world) {
    init_process_group("nccl", {.timeout = 120s});
    scenarios(world, torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(get_local_rank())));
    destroy_process_group();
      },
      {.deadline = 280s});
}

}  // namespace
}  // namespace ddp::test
