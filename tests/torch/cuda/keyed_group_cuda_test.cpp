// Device-keyed groups on a GPU: "cpu:gloo,cuda:nccl" (the default where CUDA is available) takes
// CPU tensors over gloo and CUDA tensors over NCCL in one group; nccl alone still runs ddp's own
// collectives (the straggler report, ZeroRedundancyOptimizer's state), whose tensors go to
// ddp::collective_device. One process per GPU (a group of one on a one-GPU machine).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cuda_support.h"
#include "ddp/ddp.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

int gpus() { return std::min<int>(static_cast<int>(torch::cuda::device_count()), 4); }

torch::Device my_gpu() { return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(get_local_rank())); }

TEST(KeyedGroupCuda, CpuTensorsOverGlooAndCudaTensorsOverNcclInOneGroup) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  run_ranks(
      gpus(),
      [](int rank, int world) {
    init_process_group("", {.timeout = 120s});  // the default where CUDA is available
    EXPECT_EQ(get_backend(), "cpu:gloo,cuda:nccl");
    EXPECT_EQ(collective_device(), torch::Device(torch::kCPU));
    auto on_cpu = torch::full({1000}, rank + 1.0);
    auto on_gpu = torch::full({1000}, 10.0 * (rank + 1), torch::TensorOptions().device(my_gpu()));
    all_reduce(on_cpu);
    all_reduce(on_gpu);
    const double sum = world * (world + 1) / 2.0;
    EXPECT_EQ(on_cpu[999].item<double>(), sum);
    EXPECT_EQ(on_gpu[999].item<double>(), 10 * sum);
    // DDP on the GPU with its metrics on the CPU, as the main job does.
    auto model = std::make_shared<torch::nn::LinearImpl>(8, 4);
    model->to(my_gpu());
    DistributedDataParallel ddp_model(model, {.device_ids = {get_local_rank()}});
    ddp_model->forward(torch::ones({4, 8}, torch::TensorOptions().device(my_gpu()))).sum().backward();
    auto metric = torch::tensor({1.0});
    all_reduce(metric);
    EXPECT_EQ(metric.item<double>(), world);
    EXPECT_FALSE(ddp_model->straggler_report().text.empty());
    barrier();
    destroy_process_group();
      },
      {.deadline = 240s});
}

TEST(KeyedGroupCuda, NcclAloneRefusesCpuTensorsButRunsDdpsOwnCollectives) {
  DDP_REQUIRE_CUDA_DEVICES(1);
  run_ranks(
      gpus(),
      [](int, int world) {
    init_process_group("nccl", {.timeout = 120s});
    EXPECT_EQ(collective_device(), my_gpu());
    auto on_cpu = torch::ones({4});
    try {
      all_reduce(on_cpu);
      ADD_FAILURE() << "a CPU tensor went over nccl alone";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("init_process_group(\"cpu:gloo,cuda:nccl\")"), std::string::npos)
          << e.what();
    }
    auto model = std::make_shared<torch::nn::LinearImpl>(8, 4);
    model->to(my_gpu());
    DistributedDataParallel ddp_model(model, {.device_ids = {get_local_rank()}});
    ddp_model->forward(torch::ones({4, 8}, torch::TensorOptions().device(my_gpu()))).sum().backward();
    EXPECT_FALSE(ddp_model->straggler_report().text.empty());
    ZeroRedundancyOptimizer<torch::optim::Adam> zero(model->parameters(), torch::optim::AdamOptions(1e-3));
    zero.step();
    zero.consolidate_state_dict(0);  // a gather of every rank's shard, through the GPU
    (void)world;
    destroy_process_group();
      },
      {.deadline = 240s});
}

}  // namespace
}  // namespace ddp::test
