// ddp::join beyond PyTorch's numbers (join_pytorch_parity_test.cpp has those): early termination,
// comm hooks and static_graph under a join, ranks that disagree about the join, bad arguments.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdio>

#include "ddp/ddp.h"
#include "ddp/torch/join.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"
#include "ddp/models.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

// `steps` SGD steps of `model` on this rank's own batches.
template <typename Model>
void train(Model& model, torch::optim::Optimizer& optimizer, int rank, int steps, int* done = nullptr) {
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(100 * rank + step, 6);
    optimizer.zero_grad();
    torch::nll_loss(torch::log_softmax(model->forward(x), 1), y).backward();
    optimizer.step();
    if (done) ++*done;
  }
}

at::Tensor flat_parameters(torch::nn::Module& m) {
  std::vector<at::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().flatten());
  return torch::cat(parts);
}

// Every rank holds `t` (bit for bit).
void expect_same_everywhere(const at::Tensor& t) {
  auto lo = t.clone(), hi = t.clone();
  all_reduce(lo, ReduceOp::MIN);
  all_reduce(hi, ReduceOp::MAX);
  EXPECT_TRUE(at::equal(lo, hi)) << "the ranks' models differ";
}

TEST(Join, ThrowOnEarlyTerminationThrowsOnEveryRankNamingTheRankThatRanOut) {
  run_ranks(3, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    DistributedDataParallel model(std::make_shared<Mlp>());
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    int done = 0;
    expect_error<Error>(
        [&] {
      join({&model}, [&] { train(model, optimizer, rank, rank == 1 ? 1 : 3, &done); },
           {.throw_on_early_termination = true});
        },
        {"rank 1 has run out of inputs while ranks 0, 2 still train", "every rank throws"});
    EXPECT_EQ(done, 1) << "every rank stops at the iteration after rank 1's last";
    // The group and the model go on working.
    join({&model}, [&] { train(model, optimizer, rank, 2); }, {.throw_on_early_termination = true});
    expect_same_everywhere(flat_parameters(*model));
    destroy_process_group();
  });
}

TEST(Join, ARankWithNoInputsAtAllShadowsEveryIterationWithTheCommHook) {
  // Rank 1 has nothing to train on: its hook still runs once per bucket and iteration of rank 0,
  // on zeros; the result is rank 0's gradients averaged over the initial world size.
  run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    auto net = std::make_shared<Mlp>();
    DistributedDataParallel model(net, {.bucket_cap_mb = 0.002});  // several buckets
    auto calls = std::make_shared<int>(0);
    auto allreduce = comm_hooks::allreduce();
    model->register_comm_hook([calls, allreduce](GradBucket& bucket) {
      ++*calls;
      return allreduce(bucket);
    });
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    join({&model}, [&] { train(model, optimizer, rank, rank == 0 ? 3 : 0); });
    const auto buckets = static_cast<int>(model->bucket_plan().size());
    EXPECT_GT(buckets, 1);
    EXPECT_EQ(*calls, 3 * buckets);
    expect_same_everywhere(flat_parameters(*net));
    // One process replaying rank 0's three steps with half its gradients gets the same model.
    torch::manual_seed(0);
    auto alone = std::make_shared<Mlp>();
    torch::optim::SGD reference(alone->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = batch(step, 6);
      reference.zero_grad();
      (torch::nll_loss(torch::log_softmax(alone->forward(x), 1), y) / 2).backward();
      reference.step();
    }
    EXPECT_LT(max_relative_difference(*net, *alone), 1e-6);
    destroy_process_group();
  });
}

TEST(Join, CompressedHooksNoSyncAndStaticGraphAreShadowed) {
  // Uneven inputs with fp16 compression, gradient accumulation (no_sync) on the ranks still
  // training, and static_graph learned by a rank that never trained (it takes the counts from the
  // rank that did): every rank ends with the same model, and the next, even epoch trains on.
  run_ranks(3, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    torch::manual_seed(0);
    auto net = std::make_shared<Mlp>();
    DistributedDataParallel model(net, {.static_graph = true});
    model->register_comm_hook(comm_hooks::fp16_compress());
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    const int batches = std::vector<int>{0, 5, 2}[rank];
    join({&model}, [&] {
      for (int step = 0; step < batches; ++step) {
        auto [x, y] = batch(100 * rank + step, 6);
        auto loss = [&] { torch::nll_loss(torch::log_softmax(model->forward(x), 1), y).backward(); };
        if (step % 2 == 0 && step + 1 < batches) {
          auto guard = model->no_sync();
          loss();
          continue;
        }
        loss();
        optimizer.step();
        optimizer.zero_grad();
      }
    });
    expect_same_everywhere(flat_parameters(*net));
    join({&model}, [&] { train(model, optimizer, rank, 2); });
    expect_same_everywhere(flat_parameters(*net));
    destroy_process_group();
  });
}

// The two mismatch tests below run with DDP_DEBUG=1, which names the mismatch at once on every
// rank. Without it, on one host, the shared-memory ops' signatures name it (the third test);
// across hosts a small all_reduce's partners compare their calls, and a larger one, in Gloo's ring,
// ends the rank whose receive is overflowed, saying why (Failures.* in tests/core/group).

TEST(Join, WithoutOneUnevenInputsAreACollectiveMismatchNamingWhatTheRankThatStoppedDoes) {
  // What ddp::join is for: rank 0 runs out after one batch and goes on to the end-of-epoch
  // barrier while rank 1 waits in its next gradient all-reduce.
  run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 3s});
    torch::manual_seed(0);
    DistributedDataParallel model(std::make_shared<Mlp>());
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    if (rank == 0) {
      train(model, optimizer, rank, 1);
      expect_error<Error>([&] { barrier(); }, {"ranks called different collectives", "rank 1 called all_reduce"});
    } else {
      expect_error<Error>([&] { train(model, optimizer, rank, 2); },
                          {"the gradient all-reduce of bucket 0 failed", "rank 0 called barrier"});
    }
      },
      {.env = {{"DDP_DEBUG", "1"}}});
}

TEST(Join, ARankThatLeavesTheJoinWhileOthersTrainWithoutOneIsAMismatchNamedOnBothRanks) {
  // Rank 0 trains inside a join, rank 1 outside one with more batches: rank 0's shadow answers
  // rank 1's gradient all-reduce with an announcement. Both fail, saying that the ranks called
  // different collectives.
  run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 3s});
    torch::manual_seed(0);
    DistributedDataParallel model(std::make_shared<Mlp>());
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    if (rank == 0) {
      expect_error<Error>([&] { join({&model}, [&] { train(model, optimizer, rank, 1); }); },
                          {"ranks called different collectives"});
    } else {
      expect_error<Error>([&] { train(model, optimizer, rank, 3); }, {"ranks called different collectives"});
    }
      },
      {.env = {{"DDP_DEBUG", "1"}}});
}

TEST(Join, WithoutOneOrDdpDebugUnevenInputsAreStillAMismatchNamedOnOneHost) {
  // As the first mismatch test, without DDP_DEBUG: the barrier meets the gradient all-reduce in
  // shared memory, whose op signatures differ. The rank that sees it first names both ops and
  // aborts the group; the other may report the abort instead.
  auto results = run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s, .variables = {{"DDP_DEBUG", "0"}}});
    torch::manual_seed(0);
    DistributedDataParallel model(std::make_shared<Mlp>());
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    const auto start = std::chrono::steady_clock::now();
    try {
      if (rank == 0) {
        train(model, optimizer, rank, 1);
        barrier();
      } else {
        train(model, optimizer, rank, 2);
      }
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string message = e.what();
      if (message.find("the ranks called different collectives") != std::string::npos) {
        EXPECT_NE(message.find(rank == 0 ? "called barrier where rank 1" : "called barrier"), std::string::npos)
            << message;
        std::fprintf(stderr, "MISMATCH SEEN\n");
      } else {
        EXPECT_NE(message.find("gave up on the group"), std::string::npos) << message;
      }
      if (rank == 1) {
        EXPECT_NE(message.find("the gradient all-reduce of bucket 0 failed"), std::string::npos) << message;
      }
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << "the timeout is 30 s: the mismatch is seen at once";
  });
  if (is_rank_process()) return;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].output.find("MISMATCH SEEN") != std::string::npos ||
              results[1].output.find("MISMATCH SEEN") != std::string::npos)
      << results[0].output << results[1].output;
}

TEST(Join, EnableFalseRunsTheLoopAsItIs) {
  run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    DistributedDataParallel model(std::make_shared<Mlp>());
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    train(model, optimizer, rank, 1);  // the first backward also rebuilds the buckets
    auto group = get_default_group();
    const auto start = group->sequence_number();
    train(model, optimizer, rank, 2);
    const auto plain = group->sequence_number() - start;
    join({&model}, [&] { train(model, optimizer, rank, 2); }, {.enable = false});
    EXPECT_EQ(group->sequence_number() - start, 2 * plain) << "a disabled join issued collectives of its own";
    destroy_process_group();
  });
}

TEST(Join, BadArgumentsAreRejected) {
  init_process_group("gloo");
  DistributedDataParallel a(std::make_shared<Mlp>());
  auto other_group = new_group({0});
  DistributedDataParallel b(std::make_shared<Mlp>(), {.process_group = other_group});
  auto nothing = [] {};
  expect_error<InvalidArgument>([&] { join({}, nothing); }, {"the list of joinables is empty"});
  expect_error<InvalidArgument>([&] { join({static_cast<Joinable*>(nullptr)}, nothing); }, {"joinable 0 is null"});
  expect_error<InvalidArgument>([&] { join({&a, &b}, nothing); }, {"joinable 1 communicates on another process group"});
  expect_error<InvalidArgument>([&] { join({a}, [&] { join({a}, nothing); }); }, {"a join is already running"});
  // A failed join leaves nothing behind: the next one runs.
  bool ran = false;
  join({a}, [&] { ran = true; });
  EXPECT_TRUE(ran);
  destroy_process_group();
}

}  // namespace
}  // namespace ddp::test
