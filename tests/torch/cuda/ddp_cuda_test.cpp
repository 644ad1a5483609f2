// DistributedDataParallel on CUDA modules: N ranks on their shards must end where one process
// training on the whole batch ends, on nccl (a group of one; one process per GPU when there are
// several) and on gloo with several ranks sharing one GPU; plus device_ids and output_device; and
// mixed precision (fp16 autocast, the GradScaler) on CUDA.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "../ddp/models.h"
#include "cuda_support.h"
#include "ddp/ddp.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

constexpr int kSteps = 10;
constexpr int kRows = 6;

struct Scenario {
  std::string name;
  DDPOptions options;
  CommHook hook;
  double tolerance = 1e-4;  // cuBLAS reduces in its own order
};

// Trains a DDP model and a single-process reference side by side on `device` for kSteps steps;
// returns the largest relative difference of their parameters.
template <typename M>
double train(const Scenario& s, int rank, int world, int features, const torch::Device& device) {
  torch::manual_seed(7);
  auto model = std::make_shared<M>();
  torch::manual_seed(7);
  auto reference = std::make_shared<M>();
  model->to(device);
  reference->to(device);
  DistributedDataParallel ddp_model(model, s.options);
  if (s.hook) ddp_model->register_comm_hook(s.hook);
  torch::optim::SGD optimizer(ddp_model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_optimizer(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, world * kRows, features);
    // The DDP model gets its shard on the CPU when device_ids is set: DDP moves it.
    auto xs = x.narrow(0, rank * kRows, kRows);
    if (s.options.device_ids.empty()) xs = xs.to(device);
    auto ys = y.narrow(0, rank * kRows, kRows).to(device);
    optimizer.zero_grad();
    auto out = ddp_model->forward(xs);
    EXPECT_EQ(out.device(), device);
    torch::cross_entropy_loss(out, ys).backward();
    optimizer.step();
    ref_optimizer.zero_grad();
    auto loss = torch::zeros({}, torch::TensorOptions().device(device));
    for (int shard = 0; shard < world; ++shard) {
      auto xr = x.narrow(0, shard * kRows, kRows).to(device), yr = y.narrow(0, shard * kRows, kRows).to(device);
      loss = loss + torch::cross_entropy_loss(reference->forward(xr), yr) / world;
    }
    loss.backward();
    ref_optimizer.step();
  }
  auto a = ddp_model->module()->parameters(), b = reference->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].is_cuda());
  return max_relative_difference(*ddp_model->module(), *reference);
}

void train_scenarios(int rank, int world, const torch::Device& device) {
  const int d = device.index();
  for (const Scenario& s : {Scenario{"MLP"}, Scenario{"MLP, device_ids", {.device_ids = {d}}},
                            Scenario{"MLP, tiny buckets", {.device_ids = {d}, .bucket_cap_mb = 1e-6}},
                            Scenario{"MLP, bucket views", {.gradient_as_bucket_view = true}},
                            Scenario{"MLP, allreduce hook", {}, comm_hooks::allreduce()},
                            Scenario{"MLP, fp16 hook", {}, comm_hooks::fp16_compress(), 5e-3},
                            Scenario{"MLP, unused parameters found", {.find_unused_parameters = true}}}) {
    EXPECT_LE(train<Mlp>(s, rank, world, 20, device), s.tolerance) << s.name << " on " << world << " ranks";
  }
  Scenario bn{"CNN with BatchNorm", {.device_ids = {d}}};
  EXPECT_LE(train<ConvBn>(bn, rank, world, 64, device), bn.tolerance) << bn.name;
}

TEST(DdpCuda, AGroupOfOneOnNcclTrainsLikeNoDdp) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  init_process_group("nccl", {.world_size = 1, .rank = 0});
  train_scenarios(0, 1, torch::Device(torch::kCUDA, 0));
  destroy_process_group();
}

TEST(DdpCuda, OnASideStreamToo) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  init_process_group("nccl", {.world_size = 1, .rank = 0});
  c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, 0));
  Scenario s{"MLP, allreduce hook, side stream", {.device_ids = {0}}, comm_hooks::allreduce()};
  EXPECT_LE(train<Mlp>(s, 0, 1, 20, torch::Device(torch::kCUDA, 0)), s.tolerance);
  destroy_process_group();
}

class DdpCudaThroughGloo : public ::testing::TestWithParam<int> {};

TEST_P(DdpCudaThroughGloo, SeveralRanksOnOneGpuMatchOneProcess) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  run_ranks(
      GetParam(),
      [](int rank, int world) {
    init_process_group("gloo", {.timeout = 120s});
    train_scenarios(rank, world, torch::Device(torch::kCUDA, 0));
    destroy_process_group();
      },
      {.deadline = 280s});
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpCudaThroughGloo, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(DdpCuda, OneProcessPerGpuOnNcclMatchesOneProcess) {
  DDP_REQUIRE_CUDA_DEVICES(2);
  const int world = std::min<int>(static_cast<int>(torch::cuda::device_count()), 4);
  run_ranks(
      world,
      [](int rank, int world) {
    init_process_group("nccl", {.timeout = 120s});
    train_scenarios(rank, world, torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(get_local_rank())));
    destroy_process_group();
      },
      {.deadline = 280s});
}

TEST(DdpCuda, DeviceIdsMoveInputsAndOutputDeviceMovesOutputs) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  init_process_group("nccl", {.world_size = 1, .rank = 0});
  const int gpus = static_cast<int>(torch::cuda::device_count());
  auto model = std::make_shared<Mlp>();
  model->to(torch::Device(torch::kCUDA, 0));
  {
    DistributedDataParallel ddp_model(model, {.device_ids = {0}});
    EXPECT_TRUE(ddp_model->forward(torch::randn({3, 20})).is_cuda());  // a CPU input, moved
  }
  if (gpus > 1) {
    DistributedDataParallel ddp_model(model, {.device_ids = {0}, .output_device = 1});
    EXPECT_EQ(ddp_model->forward(torch::randn({3, 20})).device(), torch::Device(torch::kCUDA, 1));
  }
  try {
    DistributedDataParallel ddp_model(model, {.device_ids = {0}, .output_device = gpus});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("output_device " + std::to_string(gpus) + " is not a CUDA device"),
              std::string::npos)
        << e.what();
  }
  if (gpus > 1) {
    try {
      DistributedDataParallel ddp_model(model, {.device_ids = {1}});
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("device_ids must name the one device the module is on (cuda:0)"),
                std::string::npos)
          << e.what();
    }
  }
  destroy_process_group();
}

}  // namespace
}  // namespace ddp::test

namespace ddp::test {
namespace {

// Mixed precision on CUDA: fp16 autocast, and a GradScaler whose scale sequence over a scripted
// pattern of finite and inf steps equals the same scaler's on CPU tensors (LibTorch's fused
// _amp_* kernels on the GPU, ddp's ATen arithmetic on the CPU), with the inf steps skipped.
TEST(AmpCuda, Fp16AutocastAndAGradScalerThatMatchesItsCpuTwin) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  const torch::Device gpu(torch::kCUDA, 0);
  {
    amp::Autocast autocast(torch::kCUDA);
    EXPECT_EQ(torch::mm(torch::randn({4, 4}, gpu), torch::randn({4, 4}, gpu)).scalar_type(), torch::kHalf);
  }
  EXPECT_EQ(torch::mm(torch::randn({4, 4}, gpu), torch::randn({4, 4}, gpu)).scalar_type(), torch::kFloat);
  const std::vector<bool> poisoned = {false, false, true, false, false, false, true, true, false, false};
  auto run = [&](const torch::Device& device) {
    torch::manual_seed(3);
    auto net = std::make_shared<Mlp>();
    net->to(device);
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.01));
    amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
    std::vector<double> scales;
    std::vector<bool> stepped;
    for (std::size_t step = 0; step < poisoned.size(); ++step) {
      auto [x, y] = batch(static_cast<int>(step), 8);
      optimizer.zero_grad();
      auto loss = torch::cross_entropy_loss(net->forward(x.to(device)), y.to(device));
      if (poisoned[step]) loss = loss * std::numeric_limits<float>::infinity();
      scaler.scale(loss).backward();
      stepped.push_back(scaler.step(optimizer));
      scaler.update();
      scales.push_back(scaler.get_scale());
    }
    return std::make_pair(scales, stepped);
  };
  const auto [gpu_scales, gpu_stepped] = run(gpu);
  const auto [cpu_scales, cpu_stepped] = run(torch::Device(torch::kCPU));
  EXPECT_EQ(gpu_scales, cpu_scales);
  EXPECT_EQ(gpu_stepped, cpu_stepped);
  for (std::size_t step = 0; step < poisoned.size(); ++step) EXPECT_EQ(gpu_stepped[step], !poisoned[step]) << step;
}

}  // namespace
}  // namespace ddp::test
