// DDP on N ranks, each on its shard of the batch, must end where one process training on the
// whole batch ends: 20 steps of SGD with momentum, for each model and option.
#include <gtest/gtest.h>

#include "ddp/ddp.h"
#include "models.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

constexpr int kSteps = 20;
constexpr int kRows = 6;  // per rank and micro-batch

struct Scenario {
  std::string name;
  DDPOptions options;
  int micro_batches = 1;  // > 1: accumulate under no_sync, synchronize on the last
  CommHook hook;
  double tolerance = 1e-5;
  bool set_to_none = false;  // clear gradients as LibTorch 2.x's zero_grad() does (1.13 zero-fills)
};

void clear_gradients(torch::optim::Optimizer& optimizer, bool set_to_none) {
  if (!set_to_none) return optimizer.zero_grad();
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
  }
}

// Runs one scenario on this rank and returns max relative difference to the reference.
template <typename M, typename Forward>
double run(const Scenario& s, int rank, int world, int features, Forward forward) {
  torch::manual_seed(7);
  auto model = std::make_shared<M>();
  torch::manual_seed(7);
  auto reference = std::make_shared<M>();
  DistributedDataParallel ddp_model(model, s.options);
  if (s.hook) ddp_model->register_comm_hook(s.hook);
  torch::optim::SGD optimizer(ddp_model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_optimizer(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    // DDP: this rank's shard.
    clear_gradients(optimizer, s.set_to_none);
    for (int m = 0; m < s.micro_batches; ++m) {
      auto [x, y] = batch(step * 10 + m, world * kRows, features);
      auto xs = x.narrow(0, rank * kRows, kRows), ys = y.narrow(0, rank * kRows, kRows);
      auto loss_of = [&] {
        return torch::cross_entropy_loss(forward(ddp_model, xs, rank, step, m), ys) / s.micro_batches;
      };
      if (m + 1 < s.micro_batches) {
        auto guard = ddp_model->no_sync();
        loss_of().backward();
      } else {
        loss_of().backward();
      }
    }
    optimizer.step();
    // Reference: every shard forwarded separately, as each rank forwards its own (BatchNorm's
    // batch statistics are per shard in DDP too; in training mode the running statistics do not
    // affect the parameters).
    ref_optimizer.zero_grad();
    at::Tensor total = at::zeros({});
    for (int shard = 0; shard < world; ++shard) {
      for (int m = 0; m < s.micro_batches; ++m) {
        auto [x, y] = batch(step * 10 + m, world * kRows, features);
        auto xs = x.narrow(0, shard * kRows, kRows), ys = y.narrow(0, shard * kRows, kRows);
        total =
            total + torch::cross_entropy_loss(forward(reference, xs, shard, step, m), ys) / (world * s.micro_batches);
      }
    }
    total.backward();
    ref_optimizer.step();
  }
  return max_relative_difference(*ddp_model->module(), *reference);
}

auto plain = [](auto& m, const at::Tensor& x, int, int, int) { return m->forward(x); };

// `own_hosts`: each rank on a host of its own (DDP_SHM_HOST_ID), where DDP runs every other bucket
// on its group's twin, two buckets in flight (docs/DDP.md).
void run_all(int rank, int world, bool own_hosts = false) {
  torch::set_num_threads(1);
  std::map<std::string, std::string> variables;
  if (own_hosts) variables["DDP_SHM_HOST_ID"] = "host" + std::to_string(rank);
  init_process_group("gloo", {.timeout = 120s, .variables = variables});
  if (own_hosts) {
    ASSERT_EQ(get_default_group()->hosts(), world);
  }
  auto check = [&](double diff, const Scenario& s) {
    EXPECT_LE(diff, s.tolerance) << s.name << " on " << world << " ranks";
  };
  for (const Scenario& s :
       {Scenario{"MLP"}, Scenario{"MLP, tiny buckets", {.bucket_cap_mb = 1e-6}},
        Scenario{"MLP, one huge bucket", {.bucket_cap_mb = 1000}},
        Scenario{"MLP, gradient_as_bucket_view", {.gradient_as_bucket_view = true}},
        Scenario{"MLP, no_sync over 4 micro-batches", {}, 4},
        Scenario{"MLP, no_sync, bucket views", {.bucket_cap_mb = 1e-6, .gradient_as_bucket_view = true}, 4},
        Scenario{"MLP, fp16 hook", {}, 1, comm_hooks::fp16_compress(), 5e-3},
        Scenario{"MLP, bf16 hook", {}, 1, comm_hooks::bf16_compress(), 3e-2},
        Scenario{"MLP, gradients set to none", {}, 1, {}, 1e-5, true},
        Scenario{"MLP, bucket views, gradients set to none", {.gradient_as_bucket_view = true}, 2, {}, 1e-5, true}}) {
    check(run<Mlp>(s, rank, world, 20, plain), s);
  }
  Scenario bn{"CNN with BatchNorm"};
  check(run<ConvBn>(bn, rank, world, 64, plain), bn);
  Scenario tied{"tied parameters", {.bucket_cap_mb = 1e-6}};
  check(run<Tied>(tied, rank, world, 20, plain), tied);
  // A branch unused in some steps, differently on each rank.
  auto branchy = [](auto& m, const at::Tensor& x, int shard, int step, int) {
    return m->forward(x, (shard + step) % 3 == 0);
  };
  Scenario unused{"unused branch", {.bucket_cap_mb = 1e-6, .find_unused_parameters = true}};
  check(run<Branchy>(unused, rank, world, 20, branchy), unused);
  Scenario unused_views{"unused branch, views", {.find_unused_parameters = true, .gradient_as_bucket_view = true}};
  check(run<Branchy>(unused_views, rank, world, 20, branchy), unused_views);
  destroy_process_group();
}

class DdpEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(DdpEquivalence, MatchesOneProcessOnTheWholeBatch) {
  run_ranks(GetParam(), [](int rank, int world) { run_all(rank, world); }, {.deadline = 280s});
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpEquivalence, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

class DdpEquivalenceAcrossHosts : public ::testing::TestWithParam<int> {};

TEST_P(DdpEquivalenceAcrossHosts, MatchesOneProcessOnTheWholeBatchWithTwoBucketsInFlight) {
  run_ranks(GetParam(), [](int rank, int world) { run_all(rank, world, true); }, {.deadline = 280s});
}

INSTANTIATE_TEST_SUITE_P(Ranks, DdpEquivalenceAcrossHosts, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(DdpEquivalenceAlone, AGroupOfOneTrainsLikeNoDdp) { run_all(0, 1); }

struct Weights : torch::nn::Module {
  Weights() { w = register_parameter("w", torch::zeros({4099})); }
  at::Tensor forward(const at::Tensor& x) { return (w * x).sum(); }
  at::Tensor w;
};

// PyTorch's reducer averages by multiplying each gradient by 1 / world size while copying it into
// the bucket, then summing; at 3 ranks that differs in the last bit from dividing by 3. The
// shared-memory sum folds the ranks in rank order, which fixes the expected bits.
TEST(DdpNumerics, TheAverageIsPyTorchsMultiplyByTheReciprocalThenSum) {
  run_ranks(3, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto module = std::make_shared<Weights>();
    DistributedDataParallel model(module);
    auto grad_of = [](int r) { return torch::rand({4099}, torch::TensorOptions().dtype(torch::kFloat)) + r; };
    torch::manual_seed(100 + rank);
    auto mine = grad_of(rank);
    model->forward(mine).backward();
    at::Tensor expected, divided;
    for (int r = 0; r < world; ++r) {
      torch::manual_seed(100 + r);
      auto g = grad_of(r);
      auto scaled = g * (1.0 / world);
      expected = r == 0 ? scaled : expected + scaled;
      divided = r == 0 ? g / world : divided + g / world;
    }
    ASSERT_FALSE(torch::equal(expected, divided)) << "the data do not tell the two arithmetics apart";
    EXPECT_TRUE(torch::equal(module->w.grad(), expected));
  });
}

}  // namespace
}  // namespace ddp::test
