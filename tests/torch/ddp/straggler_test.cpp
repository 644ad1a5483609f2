// The straggler report: the pure comparison of the ranks' step times, and DDP timing real steps
// of two ranks of which one sleeps in its "data loading".
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "ddp/ddp.h"
#include "models.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

RankStepTimes times(int rank, std::int64_t steps, double forward, double backward, double wait, double outside) {
  return {rank, "h" + std::to_string(rank / 2), steps, forward, backward, wait, outside};
}

TEST(StragglerReport, NamesTheSlowestRankHowMuchSlowerAndThePartItLosesIn) {
  // Per step: rank 3 spends 60 ms outside DDP where the others spend 10; the others wait for it.
  std::vector<RankStepTimes> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(times(r, 10, 0.2, 0.4, 0.5, 0.1));
  ranks.push_back(times(3, 10, 0.2, 0.4, 0.0, 0.6));
  const StragglerReport report = make_straggler_report(ranks);
  EXPECT_EQ(report.straggler, 3);
  EXPECT_EQ(report.steps, 10);
  EXPECT_NEAR(report.ratio, 1.2 / 0.7, 1e-9);
  EXPECT_EQ(report.part, "outside DDP");
  EXPECT_NEAR(report.part_share, 0.5, 1e-9);
  EXPECT_EQ(
      report.text,
      "rank 3 (host h1) is the straggler: its step takes 1.71x the other ranks' median (120.0 ms without waiting, over "
      "10 steps), 50% of it outside DDP (data loading, the optimizer?)");
}

TEST(StragglerReport, ASlowBackwardIsNamedAsSuchAndEvenRanksHaveNoStraggler) {
  std::vector<RankStepTimes> ranks{times(0, 4, 0.4, 0.8, 0.4, 0.4), times(1, 4, 0.4, 1.2, 0, 0.4)};
  StragglerReport report = make_straggler_report(ranks);
  EXPECT_EQ(report.straggler, 1);
  EXPECT_EQ(report.part, "backward");
  EXPECT_NE(report.text.find("60% of it backward"), std::string::npos) << report.text;

  ranks[1].backward = 0.84;  // 1.05x: within what a busy machine does to anyone
  report = make_straggler_report(ranks);
  EXPECT_EQ(report.text.rfind("no straggler over 4 steps: the slowest rank, rank 1 (host h0), takes 1.0", 0), 0)
      << report.text;
}

TEST(StragglerReport, WithoutStepsItSaysSoAndRanksWithoutStepsAreLeftOut) {
  EXPECT_EQ(make_straggler_report({times(0, 0, 0, 0, 0, 0), times(1, 0, 0, 0, 0, 0)}).text,
            "no straggler report yet: no rank has finished a synchronized step since the last report");
  const auto report = make_straggler_report({times(0, 0, 5, 5, 5, 5), times(1, 3, 0.3, 0.3, 0, 0.3)});
  EXPECT_EQ(report.straggler, 1);
  EXPECT_EQ(report.steps, 3);
}

TEST(StragglerReport, DdpFindsTheRankThatSleepsInItsDataLoading) {
  const std::string record = "/tmp/ddp-straggler-" + std::to_string(::getpid()) + ".txt";
  run_ranks(
      2,
      [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    {
      DistributedDataParallel model(std::make_shared<Mlp>());
      torch::optim::SGD optimizer(model->parameters(), 0.01);
      auto step = [&] {
        // A slow data loader; 60 ms keeps the ratio above 5 on a machine busy with other work (30 ms did not).
        if (rank == 1) std::this_thread::sleep_for(60ms);
        optimizer.zero_grad();
        model->forward(torch::randn({8, 20})).pow(2).mean().backward();
        optimizer.step();
      };
      step();
      model->straggler_report();  // the first step (bucket rebuild, warm-up) is not what is compared
      for (int i = 0; i < 6; ++i) step();
      const StragglerReport report = model->straggler_report();
      EXPECT_EQ(report.steps, 6);
      EXPECT_EQ(report.straggler, 1) << report.text;
      EXPECT_EQ(report.part, "outside DDP") << report.text;
      EXPECT_GT(report.ratio, 5) << report.text;
      EXPECT_GT(report.ranks[0].bucket_wait, 6 * 0.02) << "rank 0 waits for rank 1 in the all-reduce";
      EXPECT_EQ(report.text.rfind("rank 1 (host ", 0), 0) << report.text;
      // Every rank gets the same report; rank 0 leaves it for the launcher.
      auto all = torch::tensor(report.ratio, torch::kFloat64);
      auto max = all.clone(), min = all.clone();
      all_reduce(max, ReduceOp::MAX);
      all_reduce(min, ReduceOp::MIN);
      EXPECT_EQ(max.item<double>(), min.item<double>());
      if (rank == 0) {
        std::ifstream in(std::getenv("DDP_STRAGGLER_REPORT"));  // the parent's path (a rank has its own pid)
        std::stringstream text;
        text << in.rdbuf();
        EXPECT_EQ(text.str(), report.text + "\n");
      }
      EXPECT_EQ(model->straggler_report().steps, 0) << "a report covers the steps since the previous one";
    }
    destroy_process_group();
      },
      {.env = {{"DDP_STRAGGLER_REPORT", record}}});
  ::unlink(record.c_str());
}

}  // namespace
}  // namespace ddp::test
