// DistributedDataParallel's behaviour beyond numerics: overlap, errors, buffers, saving.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>

#include "ddp/ddp.h"
#include "models.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

struct Deep : torch::nn::Module {
  Deep() {
    for (int i = 0; i < 6; ++i) layers.push_back(register_module("l" + std::to_string(i), torch::nn::Linear(384, 384)));
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& l : layers) x = torch::tanh(l(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};

struct Span {
  std::string name;
  double start, end;
};

std::vector<Span> read_timeline(const std::string& path) {
  std::ifstream in(path);
  std::vector<Span> spans;
  std::regex event(R"re("name": "([^"]+)", "ph": "X", "pid": \d+, "tid": \d+, "ts": ([0-9.]+), "dur": ([0-9.]+))re");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, event)) {
      double ts = std::stod(m[2]);
      spans.push_back({m[1], ts, ts + std::stod(m[3])});
    }
  }
  return spans;
}

TEST(Ddp, TheFirstBucketIsAllReducedWhileBackwardStillRuns) {
  const std::string trace = "/tmp/ddp-overlap-" + std::to_string(::getpid()) + "-{rank}.json";
  run_ranks(
      2,
      [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    {
      DistributedDataParallel model(std::make_shared<Deep>(), {.bucket_cap_mb = 0.5});
      torch::optim::SGD optimizer(model->parameters(), 0.01);
      for (int step = 0; step < 3; ++step) {
        optimizer.zero_grad();
        model->forward(torch::randn({64, 384})).pow(2).mean().backward();
        optimizer.step();
      }
      EXPECT_GT(model->bucket_plan().size(), 3u);
    }
    std::string path = std::getenv("DDP_TIMELINE");
    path.replace(path.find("{rank}"), 6, std::to_string(rank));
    auto spans = read_timeline(path);
    std::vector<Span> backwards, first_buckets, fills;
    for (const auto& s : spans) {
      if (s.name == "backward") backwards.push_back(s);
      if (s.name == "all_reduce bucket 0") first_buckets.push_back(s);
      if (s.name.rfind("fill bucket ", 0) == 0 && s.name != "fill bucket 0") fills.push_back(s);
    }
    ASSERT_EQ(backwards.size(), 3u);
    ASSERT_EQ(first_buckets.size(), 3u);
    for (int step = 0; step < 3; ++step) {
      // Launched while backward still had gradients to compute: the other buckets filled after
      // it (each as its layer's gradients arrive). Counted, not timed: a rank descheduled for a
      // while (a loaded CI machine) cannot make this fail.
      const Span& backward = backwards[step];
      const double launched = first_buckets[step].start;
      EXPECT_LT(launched, backward.end) << "step " << step;
      const auto filled_after = std::count_if(
          fills.begin(), fills.end(), [&](const Span& f) { return f.start >= launched && f.end <= backward.end; });
      EXPECT_GE(filled_after, 3) << "step " << step << ": bucket 0 launched at " << launched << " us, only "
                                 << filled_after << " buckets filled after it before backward ended at " << backward.end
                                 << " us";
    }
    ::unlink(path.c_str());
    destroy_process_group();
      },
      {.env = {{"DDP_TIMELINE", trace}}});
}

TEST(Ddp, ModelsThatDifferAcrossRanksAreNamedAtConstruction) {
  run_ranks(3, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto model = std::make_shared<torch::nn::Module>();
    model->register_module("encoder", torch::nn::Linear(8, 16));
    model->register_module("head", torch::nn::Linear(16, rank == 2 ? 5 : 4));
    expect_error<MismatchError>([&] { DistributedDataParallel ddp_model(model); },
                                {"differs across ranks at parameter 2", "rank 0: 'head.weight' [4, 16] Float",
                                 "rank 2: 'head.weight' [5, 16] Float"});
    destroy_process_group();
  });
}

TEST(Ddp, AParameterWithoutGradientIsAnErrorNamingIt) {
  run_ranks(2, [](int, int) {
    init_process_group("gloo", {.timeout = 30s});
    DistributedDataParallel model(std::make_shared<Branchy>());
    torch::optim::SGD optimizer(model->parameters(), 0.01);
    auto x = torch::randn({4, 20});
    expect_error<Error>([&] { model->forward(x, false).sum().backward(); },
                        {"2 parameters received no gradient", "'head_b.weight' [4, 16]", "'head_b.bias' [4]",
                         "find_unused_parameters = true"});
    // The next iteration starts clean, and with the branch used everything works.
    optimizer.zero_grad();
    destroy_process_group();
  });
}

TEST(Ddp, CommHookMayBeRegisteredOnceBeforeTheFirstBackward) {
  init_process_group("gloo");
  {
    DistributedDataParallel model(std::make_shared<Mlp>());
    model->register_comm_hook(comm_hooks::fp16_compress());
    expect_error<Error>([&] { model->register_comm_hook(comm_hooks::bf16_compress()); }, {"already registered"});
  }
  {
    DistributedDataParallel model(std::make_shared<Mlp>());
    model->forward(torch::randn({2, 20})).sum().backward();
    expect_error<Error>([&] { model->register_comm_hook(comm_hooks::allreduce()); }, {"backward pass has already run"});
  }
  destroy_process_group();
}

TEST(Ddp, BadOptionsAreRejected) {
  init_process_group("gloo");
  expect_error<InvalidArgument>([] { DistributedDataParallel m(std::make_shared<Mlp>(), {.bucket_cap_mb = 0}); },
                                {"bucket_cap_mb must be positive"});
  expect_error<InvalidArgument>([] { DistributedDataParallel m(std::make_shared<Mlp>(), {.device_ids = {0}}); },
                                {"device_ids", "CPU"});
  auto frozen = std::make_shared<Mlp>();
  for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  expect_error<InvalidArgument>([&] { DistributedDataParallel m(frozen); }, {"no parameters that require gradients"});
  destroy_process_group();
}

struct Scaled : torch::nn::Module {
  Scaled() {
    lin = register_module("lin", torch::nn::Linear(4, 4));
    scale = register_buffer("scale", torch::ones({4}));
  }
  at::Tensor forward(const at::Tensor& x) { return lin(x) * scale; }
  torch::nn::Linear lin{nullptr};
  at::Tensor scale;
};

TEST(Ddp, ConstructionAndForwardShareRankZerosParametersAndBuffers) {
  run_ranks(3, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(rank);  // different initial weights on every rank
    auto model = std::make_shared<Scaled>();
    DistributedDataParallel ddp_model(model);
    auto weight = model->lin->weight.detach().clone();
    all_reduce(weight, ReduceOp::MAX);
    EXPECT_TRUE(at::equal(weight, model->lin->weight.detach())) << "parameters differ after construction";
    model->scale.fill_(rank + 10);
    ddp_model->forward(torch::ones({1, 4}));
    EXPECT_TRUE(at::equal(model->scale, torch::full({4}, 10.0f))) << "buffers were not broadcast before forward";
    // Not with broadcast_buffers = false.
    torch::manual_seed(0);
    auto other = std::make_shared<Scaled>();
    DistributedDataParallel no_broadcast(other, {.broadcast_buffers = false});
    other->scale.fill_(rank);
    no_broadcast->forward(torch::ones({1, 4}));
    EXPECT_TRUE(at::equal(other->scale, torch::full({4}, static_cast<float>(rank))));
    destroy_process_group();
  });
}

TEST(Ddp, WrapsModuleHoldersAndSavesTheModuleWithoutPrefix) {
  init_process_group("gloo");
  torch::nn::Linear linear(3, 2);
  DistributedDataParallel ddp_model(linear);
  auto names = ddp_model->named_parameters().keys();
  EXPECT_EQ(names, (std::vector<std::string>{"module.weight", "module.bias"}));
  auto out = ddp_model->forward(torch::ones({1, 3}));
  out.sum().backward();
  EXPECT_TRUE(linear->weight.grad().defined());
  const std::string path = "/tmp/ddp-save-" + std::to_string(::getpid()) + ".pt";
  torch::save(ddp_model->module(), path);
  torch::nn::Linear loaded(3, 2);
  torch::load(loaded, path);
  EXPECT_TRUE(at::equal(loaded->weight, linear->weight));
  ::unlink(path.c_str());
  destroy_process_group();
}

TEST(Ddp, LoadingStateIntoTheWrappedModuleKeepsGradientsSynchronized) {
  const std::string path = "/tmp/ddp-reload-" + std::to_string(::getpid()) + ".pt";
  run_ranks(
      2,
      [&](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    auto model = std::make_shared<Mlp>();
    if (rank == 0) torch::save(model, std::getenv("MODEL_PATH"));
    barrier();
    DistributedDataParallel ddp_model(model);
    torch::load(model, std::getenv("MODEL_PATH"));  // replaces the parameters' data after wrapping
    torch::manual_seed(rank);
    ddp_model->forward(torch::randn({4, 20})).sum().backward();
    auto grad = model->c->weight.grad().clone();
    auto other = grad.clone();
    all_reduce(other, ReduceOp::MAX);
    EXPECT_TRUE(at::equal(grad, other)) << "the ranks' gradients were not averaged after Module::load";
    destroy_process_group();
      },
      {.env = {{"MODEL_PATH", path}}});
  ::unlink(path.c_str());
}

TEST(Ddp, ALostRankDuringBackwardIsAnErrorFromBackward) {
  run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    DistributedDataParallel model(std::make_shared<Deep>());
    model->forward(torch::randn({8, 384})).sum().backward();
    if (rank == 1) ::raise(SIGKILL);
    expect_error<PeerLostError>(
        [&] {
      model->forward(torch::randn({8, 384})).sum().backward();
        },
        {"DistributedDataParallel: the gradient all-reduce of bucket", "Lost rank 1"});
      },
      {.killed = {1}});
}

}  // namespace
}  // namespace ddp::test
