// GradScaler across ranks: a step with an inf gradient is skipped on every rank. With DDP the
// averaged gradients make the ranks agree by construction; where the gradients are not
// all-reduced, the scaler's process group (or a ZeroRedundancyOptimizer's) makes them agree,
// and without it they would not (the control).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "ddp/ddp.h"
#include "ddp/models.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Every rank's value of `x`, in rank order.
std::vector<double> gathered(double x) {
  auto all = torch::empty({get_world_size()}, torch::kDouble);
  all_gather_into_tensor(all, torch::tensor({x}, torch::kDouble));
  return {all.data_ptr<double>(), all.data_ptr<double>() + all.numel()};
}

TEST(GradScalerDistributed, AStepWithAnInfGradientIsSkippedOnEveryRank) {
  run_ranks(2, [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    const float poison = rank == 1 ? kInf : 1.0f;  // rank 1's loss is inf

    {  // DDP: the averaged gradients are inf on both ranks.
      torch::manual_seed(0);
      auto net = std::make_shared<Mlp>();
      DistributedDataParallel ddp_model(net);
      torch::optim::SGD optimizer(ddp_model->parameters(), 0.1);
      amp::GradScaler scaler;
      const auto before = net->parameters()[0].detach().clone();
      auto [x, y] = batch(rank, 4);
      scaler.scale(torch::cross_entropy_loss(ddp_model->forward(x), y) * poison).backward();
      EXPECT_FALSE(scaler.step(optimizer));
      scaler.update();
      EXPECT_EQ(scaler.get_scale(), 32768.0);
      EXPECT_TRUE(torch::equal(net->parameters()[0].detach(), before));
    }

    auto local_step = [&](amp::GradScaler& scaler) {  // gradients that are not all-reduced
      auto w = torch::ones({3}, torch::requires_grad());
      torch::optim::SGD optimizer({w}, 0.1);
      scaler.scale(w.sum() * poison).backward();
      const bool stepped = scaler.step(optimizer);
      scaler.update();
      return stepped;
    };
    {  // The scaler's group: rank 1's inf makes both skip, and both scales back off.
      amp::GradScaler scaler({.process_group = get_default_group()});
      EXPECT_FALSE(local_step(scaler));
      EXPECT_EQ(gathered(scaler.get_scale()), (std::vector<double>{32768.0, 32768.0}));
    }
    {  // The control: without it rank 0 steps while rank 1 skips.
      amp::GradScaler scaler;
      EXPECT_EQ(local_step(scaler), rank == 0);
      EXPECT_EQ(gathered(scaler.get_scale()), (std::vector<double>{65536.0, 32768.0}));
    }

    {  // ZeroRedundancyOptimizer, gradients not all-reduced: its own group agrees (its step is
       // collective, so a rank stepping alone would wait for the others' broadcasts).
      torch::manual_seed(1);
      Mlp net;
      ZeroRedundancyOptimizer<torch::optim::Adam> zero(net.parameters(), torch::optim::AdamOptions(0.01));
      amp::GradScaler scaler;
      for (int step = 0; step < 2; ++step) {
        const auto before = net.parameters()[0].detach().clone();
        auto [x, y] = batch(10 * step + rank, 4);  // different data per rank
        zero.zero_grad();
        scaler.scale(torch::cross_entropy_loss(net.forward(x), y) * (step == 0 ? poison : 1.0f)).backward();
        const bool stepped = scaler.step(zero);
        scaler.update();
        EXPECT_EQ(stepped, step == 1);
        EXPECT_EQ(torch::equal(net.parameters()[0].detach(), before), step == 0);
      }
      EXPECT_EQ(gathered(scaler.get_scale()), (std::vector<double>{32768.0, 32768.0}));
      // The stepped shards were broadcast: every rank holds the same parameters.
      for (auto& p : net.parameters()) {
        const double sum = p.detach().to(torch::kDouble).sum().item<double>();
        const auto all = gathered(sum);
        EXPECT_EQ(all[0], all[1]);
      }
    }
  });
}

}  // namespace
}  // namespace ddp::test
