// ddp::ZeroRedundancyOptimizer against unsharded LibTorch optimizers: on the same gradients it
// ends exactly where the plain optimizer ends, each rank holds only its shard of the state (about
// 1 / world size of it), a consolidated state saved at 2 ranks loads at 3 (and into the plain
// optimizer), the partition is PyTorch's (golden/partition.txt, from make_golden.py), and every
// misuse is refused with a message.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include <unistd.h>

#include "ddp/ddp.h"
#include "ddp/models.h"
#include "reopened_archive.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;
using torch::optim::Adam;
using torch::optim::AdamOptions;
using torch::optim::OptimizerParamGroup;

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::size_t> numbers(const std::string& text) {
  std::vector<std::size_t> out;
  for (const auto& n : split(text, ',')) out.push_back(std::stoul(n));
  return out;
}

TEST(ZeroPartition, EqualsPyTorchsPartition) {
  std::ifstream in(std::string(DDP_SOURCE_DIR) + "/tests/torch/zero/golden/partition.txt");
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    SCOPED_TRACE(line);
    const auto colon = line.find(" : ");
    const auto left = split(line.substr(0, colon), '|'), right = split(line.substr(colon + 3), '|');
    const int world = std::stoi(left[0]);
    std::vector<std::vector<std::int64_t>> sizes;
    for (std::size_t g = 1; g < left.size(); ++g) {
      auto& group = sizes.emplace_back();
      for (auto n : numbers(trim(left[g]))) group.push_back(static_cast<std::int64_t>(n));
    }
    std::vector<std::vector<std::vector<std::size_t>>> expected;
    for (const auto& rank : right) {
      auto& groups = expected.emplace_back();
      for (const auto& g : split(trim(rank), '/')) groups.push_back(numbers(g));
      groups.resize(sizes.size());  // trailing empty groups
    }
    ASSERT_EQ(static_cast<int>(expected.size()), world);
    EXPECT_EQ(detail::partition_parameters(sizes, world), expected);
    ++cases;
  }
  EXPECT_EQ(cases, 23) << "golden/partition.txt is missing or incomplete";
}

// Two groups with their own learning rates: the first layer, and the rest.
std::vector<OptimizerParamGroup> groups_of(Mlp& net) {
  std::vector<at::Tensor> first{net.a->weight, net.a->bias}, rest;
  for (auto* layer : {&net.b, &net.c}) {
    rest.push_back((*layer)->weight);
    rest.push_back((*layer)->bias);
  }
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(first, std::make_unique<AdamOptions>(AdamOptions(0.01)));
  groups.emplace_back(rest, std::make_unique<AdamOptions>(AdamOptions(0.02).weight_decay(0.1)));
  return groups;
}

// The same loss on every rank: the gradients agree without an all-reduce, so ZeRO must end
// exactly where the unsharded optimizer ends.
void train_step(Mlp& net, torch::optim::Optimizer& optimizer, int step) {
  auto [x, y] = batch(step, 8);
  optimizer.zero_grad();
  torch::cross_entropy_loss(net.forward(x), y).backward();
  optimizer.step();
}

void expect_same_parameters(Mlp& a, Mlp& b, const std::string& what) {
  auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << what << ": parameter " << i;
}

// Bytes of Adam state this rank holds.
std::int64_t adam_state_bytes(const torch::optim::Optimizer& optimizer) {
  std::int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*state);
    bytes += static_cast<std::int64_t>(s.exp_avg().nbytes() + s.exp_avg_sq().nbytes());
  }
  return bytes;
}

TEST(ZeroRedundancyOptimizer, EndsWhereAdamEndsWithOneShardOfTheStatePerRank) {
  run_ranks(3, [](int rank, int world) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    for (bool bucket_view : {false, true}) {
      SCOPED_TRACE(bucket_view ? "parameters_as_bucket_view" : "flat messages");
      torch::manual_seed(5);
      Mlp net, reference;
      {
        torch::NoGradGuard no_grad;
        for (std::size_t i = 0; i < net.parameters().size(); ++i) reference.parameters()[i].copy_(net.parameters()[i]);
      }
      ZeroRedundancyOptimizer<Adam> zero(groups_of(net), AdamOptions(0.01), {.parameters_as_bucket_view = bucket_view});
      Adam plain(groups_of(reference), AdamOptions(0.01));
      for (int step = 0; step < 6; ++step) {
        if (step == 3) {  // a schedule changes the exposed groups' options: the shard follows
          for (auto* o :
               {static_cast<torch::optim::Optimizer*>(&zero), static_cast<torch::optim::Optimizer*>(&plain)}) {
            static_cast<AdamOptions&>(o->param_groups()[1].options()).lr(0.005);
          }
        }
        train_step(net, zero, step);
        train_step(reference, plain, step);
      }
      expect_same_parameters(net, reference, "after 6 steps");
      // This rank's shard of the state, and nothing else.
      std::int64_t owned_bytes = 0, all_bytes = 0;
      std::size_t owned = 0;
      for (std::size_t g = 0; g < zero.param_groups().size(); ++g) {
        for (std::size_t i = 0; i < zero.param_groups()[g].params().size(); ++i) {
          const auto bytes = static_cast<std::int64_t>(2 * zero.param_groups()[g].params()[i].nbytes());
          all_bytes += bytes;
          if (zero.owner(g, i) == rank) owned_bytes += bytes, ++owned;
        }
      }
      EXPECT_EQ(zero.local().state().size(), owned);
      EXPECT_EQ(adam_state_bytes(zero.local()), owned_bytes);
      EXPECT_EQ(adam_state_bytes(plain), all_bytes);
      // Every rank owns something; the largest shard is the first layer's weight, 640 of 1268 elements.
      EXPECT_GT(owned, 0u);
      EXPECT_LT(owned_bytes, all_bytes * 2 / world);
      if (bucket_view) {  // each rank's parameters share one bucket: broadcast without copies
        std::vector<std::pair<at::Tensor, int>> owners;
        for (std::size_t g = 0; g < zero.param_groups().size(); ++g) {
          for (std::size_t i = 0; i < zero.param_groups()[g].params().size(); ++i) {
            owners.emplace_back(zero.param_groups()[g].params()[i], zero.owner(g, i));
          }
        }
        for (const auto& [p, r] : owners) {
          for (const auto& [q, s] : owners) EXPECT_EQ(p.is_alias_of(q), r == s);
        }
      }
    }
  });
}

// Inside ddp::join a rank that has run out of inputs keeps stepping its shard (with the averaged
// gradients DDP's hook leaves in .grad) and broadcasting it, so the sharded optimizer ends where
// the unsharded one does under the same join: 2 and 3 ranks, a rank with no batches, both divisors.
TEST(ZeroRedundancyOptimizer, InsideAJoinUnevenInputsEndWhereTheUnshardedOptimizerEnds) {
  struct Config {
    int world;
    std::vector<int> batches;
    bool divide_by_initial_world_size;
  };
  const std::vector<Config> configs = {
      {2, {4, 2}, true}, {2, {0, 3}, true}, {3, {3, 0, 5}, true}, {3, {2, 5, 1}, false}};
  run_ranks(3, [&](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto pair = new_group({0, 1});
    for (std::size_t c = 0; c < configs.size(); ++c) {
      const auto& config = configs[c];
      if (rank >= config.world) continue;
      SCOPED_TRACE("configuration " + std::to_string(c));
      const auto group = config.world == 2 ? pair : get_default_group();
      const JoinOptions options{.divide_by_initial_world_size = config.divide_by_initial_world_size};
      const int iterations = *std::max_element(config.batches.begin(), config.batches.end());
      auto train = [&](auto& ddp_model, torch::optim::Optimizer& optimizer) {
        for (int step = 0; step < config.batches[static_cast<std::size_t>(rank)]; ++step) {
          auto [x, y] = batch(100 * static_cast<int>(c) + 10 * rank + step, 4 + rank);
          optimizer.zero_grad();
          torch::cross_entropy_loss(ddp_model->forward(x), y).backward();
          optimizer.step();
        }
      };
      torch::manual_seed(7);
      auto sharded = std::make_shared<Mlp>(), reference = std::make_shared<Mlp>();
      {
        torch::NoGradGuard no_grad;
        for (std::size_t i = 0; i < sharded->parameters().size(); ++i)
          reference->parameters()[i].copy_(sharded->parameters()[i]);
      }
      DistributedDataParallel ddp_sharded(sharded, {.process_group = group});
      ZeroRedundancyOptimizer<Adam> zero(ddp_sharded->parameters(), AdamOptions(0.01), {.process_group = group});
      join(
          {&ddp_sharded, &zero}, [&] { train(ddp_sharded, zero); }, options);
      DistributedDataParallel ddp_reference(reference, {.process_group = group});
      Adam plain(ddp_reference->parameters(), AdamOptions(0.01));
      join(
          {&ddp_reference}, [&] { train(ddp_reference, plain); }, options);
      auto ps = sharded->parameters(), pr = reference->parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) {
        EXPECT_TRUE(torch::allclose(ps[i], pr[i], 0, 1e-6))
            << "parameter " << i << " differs by " << (ps[i] - pr[i]).abs().max().item<double>();
      }
      // Every shard stepped in every iteration, also on the ranks that had run out.
      for (const auto& [key, state] : zero.local().state()) {
        EXPECT_EQ(static_cast<const torch::optim::AdamParamState&>(*state).step(), iterations) << "rank " << rank;
      }
    }
    barrier();
  });
}

TEST(ZeroRedundancyOptimizer, AJoinWithoutDdpAnnouncesAtStepAndShadowsItAlone) {
  // The optimizer is the join's only joinable: its step announces that the rank trains, and its
  // hook's step on a rank that has run out must not announce again (the others would read it as
  // a rank still training and never finish).
  run_ranks(2, [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    torch::manual_seed(3);
    Mlp net;
    ZeroRedundancyOptimizer<Adam> zero(net.parameters(), AdamOptions(0.01));
    join({&zero}, [&] {
      for (int step = 0; step < (rank == 0 ? 1 : 4); ++step) train_step(net, zero, step);
    });
    std::vector<at::Tensor> flat;
    for (const auto& p : net.parameters()) flat.push_back(p.detach().flatten());
    auto mine = torch::cat(flat), theirs = mine.clone();
    broadcast(theirs, 1);
    EXPECT_TRUE(torch::equal(mine, theirs)) << "the ranks' parameters differ after the join";
  });
}

TEST(ZeroRedundancyOptimizer, AGradScalerStepInsideAJoinIsRefusedOnEveryRank) {
  run_ranks(2, [](int, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto net = std::make_shared<Mlp>();
    DistributedDataParallel ddp_model(net);
    ZeroRedundancyOptimizer<Adam> zero(ddp_model->parameters(), AdamOptions(0.01));
    amp::GradScaler scaler;
    expect_error<InvalidArgument>(
        [&] {
      join({&ddp_model, &zero}, [&] {
        auto [x, y] = batch(0, 4);
        zero.zero_grad();
        scaler.scale(torch::cross_entropy_loss(ddp_model->forward(x), y)).backward();
        scaler.step(zero);
      });
        },
        {"GradScaler::step", "inside ddp::join", "ranks that have run out of inputs"});
    barrier();  // no rank was left in a collective
  });
}

TEST(ZeroRedundancyOptimizer, ConsolidatedStateSavedAtTwoRanksLoadsAtThreeAndIntoPlainAdam) {
  const std::string dir = ::testing::TempDir() + "/zero-state-" + std::to_string(::getpid());
  const std::map<std::string, std::string> env = {{"ZERO_DIR", dir}};
  auto initial = [] {
    torch::manual_seed(11);
    return std::make_shared<Mlp>();
  };
  run_ranks(
      2,
      [&](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto net = initial();
    ZeroRedundancyOptimizer<Adam> zero(net->parameters(), AdamOptions(0.01));
    for (int step = 0; step < 3; ++step) train_step(*net, zero, step);
    if (rank == 1) {  // nothing consolidated here yet
      expect_error<Error>(
          [&] {
        torch::serialize::OutputArchive archive;
        zero.save(archive);
          },
          {"on rank 1", "has not been consolidated on this rank", "consolidate_state_dict(1)"});
    }
    zero.consolidate_state_dict(0);
    const std::string d = std::getenv("ZERO_DIR");
    if (rank == 0) {
      torch::save(zero, d + "-optimizer.pt");
      torch::save(net, d + "-model.pt");
    } else {
      expect_error<Error>(
          [&] {
        torch::serialize::OutputArchive archive;
        zero.save(archive);
          },
          {"has not been consolidated on this rank"});
    }
      },
      {.env = env});
  run_ranks(
      3,
      [&](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto net = initial();
    const std::string d = std::getenv("ZERO_DIR");
    torch::load(net, d + "-model.pt");
    ZeroRedundancyOptimizer<Adam> zero(net->parameters(), AdamOptions(0.01));
    torch::load(zero, d + "-optimizer.pt");
    std::size_t owned = 0;
    for (std::size_t i = 0; i < net->parameters().size(); ++i) owned += zero.owner(0, i) == rank;
    EXPECT_EQ(zero.local().state().size(), owned) << "a rank keeps its own shard only";
    for (const auto& [key, state] : zero.local().state()) {
      EXPECT_EQ(static_cast<const torch::optim::AdamParamState&>(*state).step(), 3);
    }
    for (int step = 3; step < 5; ++step) train_step(*net, zero, step);
    if (rank == 0) torch::save(net, d + "-resumed.pt");
      },
      {.env = env});
  if (is_rank_process()) return;

  // The reference: plain Adam, 5 steps without a break.
  auto reference = initial();
  Adam plain(reference->parameters(), AdamOptions(0.01));
  for (int step = 0; step < 5; ++step) train_step(*reference, plain, step);
  auto resumed = initial();
  torch::load(resumed, dir + "-resumed.pt");
  expect_same_parameters(*resumed, *reference, "resumed at 3 ranks");
  // LibTorch's format: plain Adam resumes from the consolidated state too.
  auto single = initial();
  torch::load(single, dir + "-model.pt");
  Adam adam(single->parameters(), AdamOptions(0.01));
  torch::load(adam, dir + "-optimizer.pt");
  for (int step = 3; step < 5; ++step) train_step(*single, adam, step);
  expect_same_parameters(*single, *reference, "plain Adam from the consolidated state");
  for (const char* f : {"-optimizer.pt", "-model.pt", "-resumed.pt"}) ::unlink((dir + f).c_str());
}

TEST(ZeroRedundancyOptimizer, AGroupOfOneWithoutAProcessGroupIsPlainAdam) {
  ASSERT_FALSE(is_initialized());
  torch::manual_seed(2);
  Mlp net, reference;
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < net.parameters().size(); ++i) reference.parameters()[i].copy_(net.parameters()[i]);
  }
  ZeroRedundancyOptimizer<Adam> zero(net.parameters(), AdamOptions(0.01));
  Adam plain(reference.parameters(), AdamOptions(0.01));
  EXPECT_EQ(zero.world_size(), 1);
  EXPECT_EQ(zero.process_group(), nullptr);
  for (int step = 0; step < 2; ++step) {
    train_step(net, zero, step);
    train_step(reference, plain, step);
  }
  expect_same_parameters(net, reference, "a group of one");
  EXPECT_EQ(zero.local().state().size(), net.parameters().size());
  zero.consolidate_state_dict(0);
  torch::serialize::OutputArchive archive;
  zero.save(archive);
}

TEST(ZeroRedundancyOptimizer, MisuseIsRefusedWithAMessage) {
  auto f = torch::ones({3}, torch::requires_grad());
  auto d = torch::ones({2}, torch::TensorOptions().dtype(at::kDouble).requires_grad(true));
  expect_error<InvalidArgument>([] { ZeroRedundancyOptimizer<Adam>(std::vector<at::Tensor>{}, AdamOptions(0.1)); },
                                {"ZeroRedundancyOptimizer", "empty parameter list"});
  expect_error<InvalidArgument>(
      [&] {
    ZeroRedundancyOptimizer<Adam>({f, d}, AdamOptions(0.1));
      },
      {"one dtype and device", "the first is Float on cpu", "parameter 1 of group 0 is Double on cpu"});
  expect_error<InvalidArgument>(
      [&] {
    ZeroRedundancyOptimizer<Adam>({f, f}, AdamOptions(0.1));
      },
      {"parameter 1 of group 0 appears more than once"});
  ZeroRedundancyOptimizer<Adam> zero({f}, AdamOptions(0.1));
  expect_error<Error>(
      [&] {
    torch::serialize::OutputArchive archive;
    zero.save(archive);
      },
      {"ZeroRedundancyOptimizer::save on rank 0", "has not been consolidated", "consolidate_state_dict(0)"});
  expect_error<InvalidArgument>([&] { zero.consolidate_state_dict(1); }, {"rank 1 is not in the group of 1 rank"});
  expect_error<InvalidArgument>([&] { zero.owner(0, 5); }, {"there is no parameter 5 in group 0"});
  expect_error<InvalidArgument>([&] { zero.add_param_group(OptimizerParamGroup({d})); }, {"is Double on cpu"});

  // A state saved for other parameters (two of them) does not fit one parameter.
  auto g = torch::ones({4}, torch::requires_grad());
  Adam other({g, torch::ones({5}, torch::requires_grad())}, AdamOptions(0.1));
  torch::serialize::OutputArchive out;
  other.save(out);
  auto in = reopened(out);
  expect_error<MismatchError>([&] { zero.load(in); },
                              {"ZeroRedundancyOptimizer::load on rank 0", "does not fit this optimizer",
                               "1 parameter group(s) of 1 parameters"});
}

TEST(ZeroRedundancyOptimizer, AddedGroupsArePartitionedAfterTheExistingOnes) {
  run_ranks(2, [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    torch::manual_seed(4);
    Mlp net, reference;
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < net.parameters().size(); ++i) reference.parameters()[i].copy_(net.parameters()[i]);
    }
    auto groups = groups_of(net), reference_groups = groups_of(reference);
    ZeroRedundancyOptimizer<Adam> zero({groups[0]}, AdamOptions(0.01));
    Adam plain({reference_groups[0]}, AdamOptions(0.01));
    const auto before = zero.partition();
    train_step(net, zero, 0);
    train_step(reference, plain, 0);
    zero.add_param_group(groups[1]);
    plain.add_param_group(reference_groups[1]);
    EXPECT_EQ(zero.partition()[static_cast<std::size_t>(rank)][0], before[static_cast<std::size_t>(rank)][0]);
    EXPECT_EQ(zero.local().param_groups().size(), 2u);
    for (int step = 1; step < 4; ++step) {
      train_step(net, zero, step);
      train_step(reference, plain, step);
    }
    expect_same_parameters(net, reference, "with an added group");
  });
}

}  // namespace
}  // namespace ddp::test
