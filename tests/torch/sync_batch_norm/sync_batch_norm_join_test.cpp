// SyncBatchNorm inside ddp::join: while some ranks have run out of inputs, the ranks still
// training normalize with their own statistics together, which is one process running plain
// BatchNorm on their batches concatenated, iteration by iteration; every rank ends with that model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

template <typename Norm>
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 8));
    bn = register_module("bn", Norm(8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Norm bn{nullptr};
};

std::pair<at::Tensor, at::Tensor> data(int rank, int step) {
  torch::manual_seed(300 + 10 * rank + step);
  auto x = torch::randn({3 + rank, 6});
  return {x, torch::randn({3 + rank, 2})};
}

at::Tensor state_of(torch::nn::Module& m) {
  std::vector<at::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().flatten());
  for (auto& b : m.buffers()) parts.push_back(b.detach().to(torch::kFloat).flatten());
  return torch::cat(parts);
}

TEST(SyncBatchNormJoin, TheRanksStillTrainingNormalizeTogether) {
  run_ranks(3, [](int rank, int world) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    const std::vector<int> batches{1, 4, 2};  // iteration 0: all three; 1: ranks 1, 2; 2, 3: rank 1
    torch::manual_seed(0);
    auto net = std::make_shared<Net<SyncBatchNorm>>();
    torch::manual_seed(0);
    auto alone = std::make_shared<Net<torch::nn::BatchNorm1d>>();
    DistributedDataParallel model(net);
    torch::optim::SGD optimizer(model->parameters(), 0.1), reference(alone->parameters(), 0.1);
    join({&model}, [&] {
      for (int step = 0; step < batches[rank]; ++step) {
        auto [x, y] = data(rank, step);
        optimizer.zero_grad();
        (model->forward(x) - y).pow(2).sum().backward();
        optimizer.step();
      }
    });
    // One process: at each iteration the batches of the ranks still training, concatenated; DDP
    // averages over the initial world size.
    for (int step = 0; step < 4; ++step) {
      std::vector<at::Tensor> xs, ys;
      for (int r = 0; r < world; ++r) {
        if (step >= batches[r]) continue;
        auto [x, y] = data(r, step);
        xs.push_back(x);
        ys.push_back(y);
      }
      reference.zero_grad();
      ((alone->forward(torch::cat(xs)) - torch::cat(ys)).pow(2).sum() / world).backward();
      reference.step();
    }
    const auto ours = state_of(*net), expected = state_of(*alone);
    EXPECT_LT((ours - expected).abs().max().item<double>(), 1e-5 * expected.abs().max().item<double>());
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp::test
