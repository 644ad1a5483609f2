// DDP's second bucket stream: where no two ranks share a host (here: each rank on an emulated host
// of its own, DDP_SHM_HOST_ID), every odd bucket's communication runs on the group's twin
// (ProcessGroup::twin), so that two buckets are in flight; on one host there is one stream. The
// hooks, a joined rank's shadow, the flight recorder and the failure diagnosis follow the buckets.
// Training across hosts equals one process: DdpEquivalenceAcrossHosts (ddp_equivalence_test.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "ddp/ddp.h"
#include "records/flight_dump.h"
#include "ddp/flight_recorder.h"
#include "ddp/torch/join.h"
#include "models.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

// Joins the default group with every rank on a host of its own, or all on this one, with
// DDP_BUCKET_STREAMS=`streams`.
void init(int rank, bool own_hosts, int streams = 2) {
  std::map<std::string, std::string> variables{{"DDP_BUCKET_STREAMS", std::to_string(streams)}};
  if (own_hosts) variables["DDP_SHM_HOST_ID"] = "host" + std::to_string(rank);
  init_process_group("gloo", {.timeout = 30s, .variables = variables});
}

template <typename Model>
void train(Model& model, torch::optim::Optimizer& optimizer, int rank, int steps) {
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(100 * rank + step, 6, 20);
    optimizer.zero_grad();
    torch::cross_entropy_loss(model->forward(x), y).backward();
    optimizer.step();
  }
}

// The group each bucket's hook was handed, by bucket index, over `steps` steps.
std::map<std::size_t, std::string> groups_the_hook_saw(int rank, int steps) {
  torch::manual_seed(0);
  DistributedDataParallel model(std::make_shared<Mlp>(), {.bucket_cap_mb = 1e-6});  // a bucket per parameter
  auto seen = std::make_shared<std::map<std::size_t, std::string>>();
  model->register_comm_hook([seen, allreduce = comm_hooks::allreduce()](GradBucket& bucket) {
    (*seen)[bucket.index()] = bucket.process_group()->name();
    return allreduce(bucket);
  });
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  train(model, optimizer, rank, steps);
  EXPECT_GE(model->bucket_plan().size(), 3u);
  return *seen;
}

TEST(BucketStreams, OddBucketsRunOnTheGroupsTwinWhereNoTwoRanksShareAHost) {
  run_ranks(3, [](int rank, int) {
    init(rank, true);
    const auto seen = groups_the_hook_saw(rank, 2);
    ASSERT_GE(seen.size(), 3u);
    for (const auto& [index, name] : seen) EXPECT_EQ(name, index % 2 ? "world~1" : "world") << "bucket " << index;
    destroy_process_group();
  });
}

TEST(BucketStreams, OneHostKeepsOneStream) {
  run_ranks(2, [](int rank, int) {
    init(rank, false);
    ASSERT_EQ(get_default_group()->hosts(), 1);
    for (const auto& [index, name] : groups_the_hook_saw(rank, 2)) EXPECT_EQ(name, "world") << "bucket " << index;
    destroy_process_group();
  });
}

// DDP_BUCKET_STREAMS=1 on one rank keeps one stream on every rank (they must agree: the twin is
// made by all of them or by none).
TEST(BucketStreams, OneRankAskingForOneStreamKeepsOneOnAll) {
  run_ranks(3, [](int rank, int) {
    init(rank, true, rank == 1 ? 1 : 2);
    for (const auto& [index, name] : groups_the_hook_saw(rank, 2)) EXPECT_EQ(name, "world") << "bucket " << index;
    destroy_process_group();
  });
}

// Without a hook: the flight recorder shows the buckets' all-reduces on both groups, each group's
// with sequence numbers of its own.
TEST(BucketStreams, TheFlightRecorderShowsBothStreams) {
  run_ranks(2, [](int rank, int) {
    init(rank, true);
    torch::manual_seed(0);
    DistributedDataParallel model(std::make_shared<Mlp>(), {.bucket_cap_mb = 1e-6});
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    constexpr int kSteps = 3;
    train(model, optimizer, rank, kSteps);
    const auto dump = detail::read_dump(dump_flight_recorder("the test reads it"));
    std::map<std::string, std::vector<std::uint64_t>> all_reduces;  // group -> sequence numbers
    for (const auto& e : dump.entries) {
      if (e.op == detail::OpType::AllReduce) all_reduces[dump.groups.at(e.group).name].push_back(e.seq);
    }
    const auto buckets = model->bucket_plan().size();
    EXPECT_GE(all_reduces["world~1"].size(), kSteps * (buckets / 2)) << "every odd bucket, every step";
    EXPECT_GE(all_reduces["world"].size(), kSteps * ((buckets + 1) / 2));
    for (std::size_t i = 0; i < all_reduces["world~1"].size(); ++i) EXPECT_EQ(all_reduces["world~1"][i], i);
    destroy_process_group();
  });
}

// A rank without inputs shadows every bucket on the stream the training rank runs it on: rank 0's
// three steps with half its gradients, as one process replays them.
TEST(BucketStreams, AJoinedRanksShadowFollowsTheStreams) {
  run_ranks(2, [](int rank, int) {
    init(rank, true);
    torch::manual_seed(0);
    auto net = std::make_shared<Mlp>();
    DistributedDataParallel model(net, {.bucket_cap_mb = 1e-6});
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    join({&model}, [&] { train(model, optimizer, 0, rank == 0 ? 3 : 0); });
    ASSERT_GE(model->bucket_plan().size(), 3u);
    torch::manual_seed(0);
    auto alone = std::make_shared<Mlp>();
    torch::optim::SGD reference(alone->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = batch(step, 6, 20);
      reference.zero_grad();
      (torch::cross_entropy_loss(alone->forward(x), y) / 2).backward();
      reference.step();
    }
    EXPECT_LT(max_relative_difference(*net, *alone), 1e-6);
    destroy_process_group();
  });
}

// A rank lost between steps: the survivors' next backward fails naming it, whichever stream's
// all-reduce finds the loss first.
TEST(BucketStreams, ALostRankIsNamedFromEitherStream) {
  const std::string done = ::testing::TempDir() + "bucket-streams-done-" + std::to_string(::getpid());
  run_ranks(
      3,
      [](int rank, int) {
    init(rank, true);
    torch::manual_seed(0);
    DistributedDataParallel model(std::make_shared<Mlp>(), {.bucket_cap_mb = 1e-6});
    torch::optim::SGD optimizer(model->parameters(), 0.1);
    train(model, optimizer, rank, 1);
    if (rank == 2) ::raise(SIGKILL);
    expect_error<Error>([&] { train(model, optimizer, rank, 1); }, {"Lost rank 2"});
    // Rank 0 hosts the store: it stays until rank 1 has read the lost rank's record there.
    const std::string file = std::getenv("DONE_FILE");
    if (rank == 1) std::ofstream(file) << "done";
    for (auto until = std::chrono::steady_clock::now() + 20s;
         rank == 0 && !std::ifstream(file) && std::chrono::steady_clock::now() < until;) {
      std::this_thread::sleep_for(10ms);
    }
      },
      {.env = {{"DONE_FILE", done}}, .killed = {2}});
  if (!is_rank_process()) ::unlink(done.c_str());
}

}  // namespace
}  // namespace ddp::test
