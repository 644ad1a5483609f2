// A mixed-precision training loop prints nothing of LibTorch's: no deprecation warning (LibTorch
// 2.4 deprecated the CPU- and CUDA-named autocast calls, each warning at every use) and no other.
// The loop runs in a process of its own, whose output is all there is to read.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

// LibTorch's warnings: "[W <file>:<line>] Warning: ..." (1.13), "[W<date> <time> <pid> <file>:<line>]
// Warning: ..." (2.x), and Python-style "UserWarning"/"deprecated" texts.
std::vector<std::string> libtorch_warnings(const std::string& output) {
  std::vector<std::string> found;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[W", 0) == 0 || line.find("Warning:") != std::string::npos ||
        line.find("deprecated") != std::string::npos) {
      found.push_back(line);
    }
  }
  return found;
}

TEST(NoWarnings, AnAutocastAndGradScalerLoopUnderDdpPrintsNone) {
  const auto ranks = run_ranks(2, [](int rank, int) {
    init_process_group("gloo");
    torch::manual_seed(0);
    auto model = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 2));
    DistributedDataParallel ddp_model(model.ptr());
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    amp::GradScaler scaler;
    for (int step = 0; step < 5; ++step) {
      optimizer.zero_grad();
      at::Tensor loss;
      {
        amp::Autocast autocast(torch::kCPU);  // bfloat16
        loss = ddp_model->forward(torch::randn({4, 8}) * (rank + 1)).pow(2).mean();
        { amp::Autocast off(torch::kCPU, {.enabled = false}); }  // a nested region, left again
      }
      scaler.scale(loss).backward();
      scaler.unscale_(optimizer);
      scaler.step(optimizer);
      scaler.update();
    }
    destroy_process_group();
  });
  for (const auto& rank : ranks) {
    EXPECT_EQ(libtorch_warnings(rank.output), std::vector<std::string>{}) << "rank " << rank.rank << ":\n"
                                                                          << rank.output;
  }
}

TEST(NoWarnings, TheFilterFindsLibTorchsWarningsOfBothVersions) {
  const std::string output =
      "ok\n[W autocast_mode.cpp:12] Warning: x (function f)\n"
      "[W1205 21:35:07.123456 4242 autocast_mode.h:49] Warning: at::autocast::is_cpu_enabled() is deprecated.\n";
  EXPECT_EQ(libtorch_warnings(output).size(), 2u);
  EXPECT_TRUE(libtorch_warnings("step 1 loss 0.3\n").empty());
}

}  // namespace
}  // namespace ddp::test
