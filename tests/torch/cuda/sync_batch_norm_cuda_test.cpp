// SyncBatchNorm on CUDA: ranks sharing one GPU through gloo, and one process per GPU on nccl,
// equal one process running plain BatchNorm on the concatenated batch (as on the CPU:
// tests/torch/sync_batch_norm/sync_batch_norm_test.cpp), uneven and empty shards included.
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
  expect_matches_one_process<torch::nn::BatchNorm2d>({1, members, rows, {4, 4}, 3, 0.1}, get_default_group(), 3, device,
                                                     1e-4);
  expect_matches_one_process<torch::nn::BatchNorm1d>({2, members, std::vector<std::int64_t>(world, 2), {}, 5,
                                                      c10::nullopt},
                                                     get_default_group(), 2, device, 1e-4);
}

TEST(SyncBatchNormCuda, RanksSharingOneGpuThroughGlooEqualOneProcess) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  run_ranks(2, [](int, int world) {
    init_process_group("gloo", {.timeout = 120s});
    scenarios(world, torch::Device(torch::kCUDA, 0));
    destroy_process_group();
  }, {.deadline = 280s});
}

TEST(SyncBatchNormCuda, OneProcessPerGpuOnNcclEqualsOneProcess) {
  DDP_REQUIRE_CUDA_DEVICES(2);
  const int world = std::min<int>(static_cast<int>(torch::cuda::device_count()), 4);
  run_ranks(world, [](int, int world) {
    init_process_group("nccl", {.timeout = 120s});
    scenarios(world, torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(get_local_rank())));
    destroy_process_group();
  }, {.deadline = 280s});
}

}  // namespace
}  // namespace ddp::test
