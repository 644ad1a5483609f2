// SyncBatchNorm on N ranks equals one process running plain BatchNorm on the concatenated batch:
// outputs, input gradients, weight and bias gradients after DDP, running statistics after several
// steps; uneven and empty shards, subgroups, 1d/2d/3d inputs, cumulative momentum
// (one_process_reference.h); errors; alone, plain BatchNorm.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "support/expect_error.h"
#include "one_process_reference.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

TEST(SyncBatchNorm, RanksEqualOneProcessOnTheConcatenatedBatch) {
  run_ranks(4, [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    // Every rank makes every group, in the same order.
    auto pair01 = new_group({0, 1}), pair23 = new_group({2, 3}), three = new_group({0, 1, 2});
    // 2d, the whole world, uneven shards and an empty one.
    expect_matches_one_process<torch::nn::BatchNorm2d>({1, {0, 1, 2, 3}, {3, 0, 5, 2}, {4, 4}, 3, 0.1},
                                                       get_default_group(), 3);
    // 1d [N, C], statistics within each pair, cumulative moving average (momentum None).
    if (rank < 2) {
      expect_matches_one_process<torch::nn::BatchNorm1d>({2, {0, 1}, {4, 1}, {}, 5, c10::nullopt}, pair01, 3);
    } else {
      expect_matches_one_process<torch::nn::BatchNorm1d>({3, {2, 3}, {2, 6}, {}, 5, c10::nullopt}, pair23, 3);
    }
    // 3d on three ranks; 1d [N, C, L] with one sample per rank.
    if (rank < 3) {
      expect_matches_one_process<torch::nn::BatchNorm3d>({4, {0, 1, 2}, {2, 3, 1}, {3, 2, 3}, 2, 0.3}, three, 2);
    }
    expect_matches_one_process<torch::nn::BatchNorm1d>({5, {0, 1, 2, 3}, {1, 1, 1, 1}, {7}, 4, 0.1},
                                                       get_default_group(), 2);
    // Without affine parameters (its autograd function then gets no weight or bias), and a
    // channels-last input.
    BatchNormScenario no_affine{6, {0, 1, 2, 3}, {3, 0, 5, 2}, {4, 4}, 3, 0.1};
    no_affine.affine = false;
    expect_matches_one_process<torch::nn::BatchNorm2d>(no_affine, get_default_group(), 2);
    BatchNormScenario channels_last{7, {0, 1, 2, 3}, {2, 3, 1, 2}, {4, 4}, 3, 0.1};
    channels_last.channels_last = true;
    expect_matches_one_process<torch::nn::BatchNorm2d>(channels_last, get_default_group(), 2);
    destroy_process_group();
  });
}

TEST(SyncBatchNorm, OneValuePerChannelOverTheGroupIsAnErrorOnEveryRank) {
  run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    SyncBatchNorm bn(3);
    expect_error<InvalidArgument>(
        [&] {
      bn->forward(torch::randn({rank == 0 ? 1 : 0, 3}));
        },
        {"expected more than 1 value per channel when training, got 1 over the group of 2"});
    // One value on each of two ranks is two values: fine.
    EXPECT_EQ(bn->forward(torch::randn({1, 3})).sizes(), (std::vector<std::int64_t>{1, 3}));
    destroy_process_group();
  });
}

TEST(SyncBatchNorm, BadInputsAreRejected) {
  SyncBatchNorm bn(4);
  expect_error<InvalidArgument>([&] { bn->forward(torch::randn({4})); },
                                {"expected an input of 2 to 5 dimensions", "got 1 ([4])"});
  expect_error<InvalidArgument>([&] { bn->forward(torch::randn({2, 4, 1, 1, 1, 1})); }, {"got 6"});
  expect_error<InvalidArgument>(
      [&] {
    bn->forward(torch::randn({2, 3, 5}));
      },
      {"expected 4 channels in dimension 1 (num_features), got 3"});
  expect_error<InvalidArgument>(
      [&] {
    bn->forward(torch::randn({1, 4}));
      },
      {"expected more than 1 value per channel when training", "alone"});
  bn->eval();
  EXPECT_EQ(bn->forward(torch::randn({1, 4})).sizes(), (std::vector<std::int64_t>{1, 4}));  // eval: fine
}

TEST(SyncBatchNorm, AloneItIsBatchNorm2dBitForBit) {
  // No process group at all, then a group of one: plain batch norm, in training and in eval.
  for (bool with_group : {false, true}) {
    if (with_group) init_process_group("gloo");
    torch::manual_seed(3);
    SyncBatchNorm bn(torch::nn::BatchNormOptions(3).momentum(0.2));
    torch::nn::BatchNorm2d plain(torch::nn::BatchNormOptions(3).momentum(0.2));
    for (int step = 0; step < 2; ++step) {
      auto x = torch::randn({4, 3, 5, 5});
      EXPECT_TRUE(at::equal(bn->forward(x), plain->forward(x)));
    }
    EXPECT_TRUE(at::equal(bn->running_var, plain->running_var));
    bn->eval();
    plain->eval();
    auto x = torch::randn({2, 3, 5, 5});
    EXPECT_TRUE(at::equal(bn->forward(x), plain->forward(x)));
    if (with_group) destroy_process_group();
  }
}

}  // namespace
}  // namespace ddp::test
