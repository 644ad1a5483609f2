// static_graph: a parameter whose gradient arrives twice in one backward (one Linear applied in
// two checkpointed segments, each recomputed by its own re-entrant backward) trains as one process
// does on the whole batch; without static_graph that is an error, and so is a graph that changes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "models.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Activation checkpointing as torch.utils.checkpoint does it (re-entrant): tanh(layer(x)) runs
// without a graph; backward recomputes it and runs a backward of its own through it.
struct Checkpointed : torch::autograd::Function<Checkpointed> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, torch::nn::LinearImpl* layer) {
    ctx->save_for_backward({x});
    ctx->saved_data["layer"] = reinterpret_cast<std::int64_t>(layer);
    return torch::tanh(layer->forward(x));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto* layer = reinterpret_cast<torch::nn::LinearImpl*>(ctx->saved_data["layer"].toInt());
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = torch::tanh(layer->forward(x));
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};

// One Linear applied twice, each application checkpointed; `twice = false` applies it once.
struct Shared : torch::nn::Module {
  Shared() {
    shared = register_module("shared", torch::nn::Linear(20, 20));
    head = register_module("head", torch::nn::Linear(20, 4));
    unused = register_module("unused", torch::nn::Linear(20, 4));
  }
  at::Tensor forward(const at::Tensor& x, bool checkpoint = true) {
    // A re-entrant checkpoint's backward runs only if an input requires grad (as with
    // torch.utils.checkpoint), so the batch is made to.
    auto apply = [&](const at::Tensor& in) {
      if (!checkpoint) return torch::tanh(shared(in));
      return Checkpointed::apply(in.requires_grad() ? in : in.detach().requires_grad_(true), shared.get());
    };
    auto h = apply(x);
    if (twice) h = apply(h);
    return head(h);
  }
  torch::nn::Linear shared{nullptr}, head{nullptr}, unused{nullptr};
  bool twice = true;
};

at::Tensor loss_of(const at::Tensor& out, const at::Tensor& y) {
  return torch::nll_loss(torch::log_softmax(out, 1), y);
}

TEST(StaticGraph, ALayerUsedInTwoCheckpointedSegmentsTrainsAsOneProcessOnTheWholeBatch) {
  run_ranks(2, [](int rank, int world) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    auto net = std::make_shared<Shared>();
    torch::manual_seed(0);
    auto alone = std::make_shared<Shared>();
    DistributedDataParallel model(net, {.static_graph = true});
    torch::optim::SGD optimizer(model->parameters(), 0.1), reference(alone->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = batch(step, 8 * world);  // the whole batch; this rank's share below
      optimizer.zero_grad();
      loss_of(model->forward(x.chunk(world)[rank]), y.chunk(world)[rank]).backward();
      optimizer.step();
      reference.zero_grad();
      loss_of(alone->forward(x, /*checkpoint=*/false), y).backward();
      reference.step();
    }
    EXPECT_LT(max_relative_difference(*net, *alone), 1e-5);
    EXPECT_FALSE(net->unused->weight.grad().defined()) << "unused on every rank: no gradient, as in PyTorch";
    destroy_process_group();
  });
}

TEST(StaticGraph, WithoutItAGradientArrivingTwiceIsAnErrorNamingTheParameter) {
  run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    auto net = std::make_shared<Shared>();
    net->unregister_module("unused");
    DistributedDataParallel model(net);
    auto [x, y] = batch(rank, 8);
    expect_error<Error>(
        [&] { loss_of(model->forward(x), y).backward(); },
        {"parameter 'shared.", "received its gradient twice in one backward pass", "{.static_graph = true}"});
    destroy_process_group();
  });
}

TEST(StaticGraph, AGraphThatChangesAfterTheFirstIterationIsAnErrorNamingTheParameter) {
  run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    auto net = std::make_shared<Shared>();
    DistributedDataParallel model(net, {.static_graph = true});
    auto [x, y] = batch(rank, 8);
    loss_of(model->forward(x), y).backward();
    loss_of(model->forward(x), y).backward();
    net->twice = false;
    expect_error<Error>([&] { loss_of(model->forward(x), y).backward(); },
                        {"(static_graph): the graph changed after the first iteration",
                         "received its gradient 1 time in this backward pass, 2 times in the first"});
    // Used again as in the first iteration, it trains on.
    net->twice = true;
    loss_of(model->forward(x), y).backward();
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp::test
