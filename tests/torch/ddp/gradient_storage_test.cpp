// Where DDP's default path keeps the gradients (reducer/bucket.h): in the buckets, so that it
// copies neither in nor out, wherever that cannot be told apart from PyTorch's copy semantics;
// and a .grad the user holds or assigned behaves as it would with the copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "ddp/ddp.h"
#include "models.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

// The gradients DDP must produce for `batch(step, 8)` split over the ranks: each rank's own,
// computed on a copy of the model without DDP, averaged with an all_reduce of their sum.
std::vector<at::Tensor> expected_gradients(Mlp& model, int step, int rank, int world) {
  auto copy = std::make_shared<Mlp>();
  {
    torch::NoGradGuard no_grad;
    auto from = model.parameters(), to = copy->parameters();
    for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  auto [x, y] = batch(step, 8);
  const auto rows = 8 / world;
  auto out = copy->forward(x.narrow(0, rank * rows, rows));
  torch::nn::functional::cross_entropy(out, y.narrow(0, rank * rows, rows)).backward();
  std::vector<at::Tensor> grads;
  for (auto& p : copy->parameters()) {
    auto g = p.grad().clone();
    all_reduce(g);
    grads.push_back(g / world);
  }
  return grads;
}

void backward(DistributedDataParallel<Mlp>& ddp_model, int step, int rank, int world) {
  auto [x, y] = batch(step, 8);
  const auto rows = 8 / world;
  auto out = ddp_model->forward(x.narrow(0, rank * rows, rows));
  torch::nn::functional::cross_entropy(out, y.narrow(0, rank * rows, rows)).backward();
}

void expect_gradients(Mlp& model, const std::vector<at::Tensor>& expected) {
  auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::allclose(params[i].grad(), expected[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

// Every gradient inside one block of memory, back to back: the bucket (the Mlp fits in one).
bool gradients_tile_one_block(Mlp& model) {
  std::vector<std::pair<const char*, std::size_t>> spans;
  for (auto& p : model.parameters()) {
    spans.emplace_back(static_cast<const char*>(p.grad().data_ptr()), p.grad().nbytes());
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i - 1].first + spans[i - 1].second != spans[i].first) return false;
  }
  return true;
}

void set_to_none(torch::nn::Module& model) {
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
}

void zero_in_place(torch::nn::Module& model) {
  for (auto& p : model.parameters()) p.mutable_grad().zero_();
}

// `body` on every rank of a group of `world`, with the same Mlp wrapped in DDP.
void with_ddp(int world, const std::function<void(Mlp&, DistributedDataParallel<Mlp>&, int, int)>& body) {
  run_ranks(world, [&](int rank, int size) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    auto model = std::make_shared<Mlp>();
    DistributedDataParallel ddp_model(model);
    body(*model, ddp_model, rank, size);
    destroy_process_group();
  });
}

// Both ways of zeroing (LibTorch 1.x's zero_grad, 2.x's set to none), at 2 ranks (the average
// taken by the all-reduce) and 3 (each gradient multiplied by 1/3 in the bucket).
class DefaultGradients : public ::testing::TestWithParam<int> {};

TEST_P(DefaultGradients, LiveInTheBucketsFromTheFirstBackwardOnAndHoldTheAverage) {
  with_ddp(GetParam(), [](Mlp& model, DistributedDataParallel<Mlp>& ddp_model, int rank, int world) {
    for (int step = 0; step < 4; ++step) {
      if (step % 2 == 0) {
        set_to_none(model);
      } else {
        zero_in_place(model);
      }
      const auto expected = expected_gradients(model, step, rank, world);
      backward(ddp_model, step, rank, world);
      expect_gradients(model, expected);
      EXPECT_TRUE(gradients_tile_one_block(model)) << "step " << step << ": a gradient was not given the bucket";
    }
  });
}

TEST_P(DefaultGradients, AGradientHeldAcrossSetToNoneKeepsItsValues) {
  with_ddp(GetParam(), [](Mlp& model, DistributedDataParallel<Mlp>& ddp_model, int rank, int world) {
    backward(ddp_model, 0, rank, world);
    // Kept by the user: a gradient, and a view of another (which shares its memory only).
    at::Tensor held = model.a->weight.grad();
    at::Tensor held_view = model.c->bias.grad().view({2, 2});
    const auto held_values = held.clone(), view_values = held_view.clone();
    set_to_none(model);
    const auto expected = expected_gradients(model, 1, rank, world);
    backward(ddp_model, 1, rank, world);
    EXPECT_TRUE(at::equal(held, held_values)) << "the next backward wrote into a gradient the user kept";
    EXPECT_TRUE(at::equal(held_view, view_values));
    expect_gradients(model, expected);
    EXPECT_FALSE(model.a->weight.grad().is_same(held));
    // Let go of them: the buckets' memory is theirs again, and so is the next .grad.
    held = at::Tensor();
    held_view = at::Tensor();
    set_to_none(model);
    backward(ddp_model, 2, rank, world);
    EXPECT_TRUE(gradients_tile_one_block(model));
  });
}

TEST_P(DefaultGradients, AGradientTheUserAssignedStaysTheGradientAndGetsTheAverage) {
  with_ddp(GetParam(), [](Mlp& model, DistributedDataParallel<Mlp>& ddp_model, int rank, int world) {
    for (int step = 0; step < 3; ++step) {
      set_to_none(model);
      at::Tensor mine = torch::zeros_like(model.b->weight);
      model.b->weight.mutable_grad() = mine;
      const auto expected = expected_gradients(model, step, rank, world);
      backward(ddp_model, step, rank, world);
      EXPECT_TRUE(model.b->weight.grad().is_same(mine)) << "step " << step << ": DDP replaced the user's tensor";
      EXPECT_TRUE(at::allclose(mine, expected[2], 1e-5, 1e-6)) << "step " << step;
      expect_gradients(model, expected);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, DefaultGradients, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace ddp::test
