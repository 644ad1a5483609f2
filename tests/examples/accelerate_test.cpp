// The Accelerator's example end to end, one binary unchanged: alone on the CPU, on 2 and 3
// processes under ddprun, with mixed precision and gradient accumulation chosen at launch, and
// stopped mid-epoch then resumed (at the same and at another world size).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "ddp/torch/state_dict.h"
#include "example_test.h"
#include "fashion_mnist/net.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class AccelerateExample : public test::ExampleTest {
 protected:
  AccelerateExample() : ExampleTest("ddp-accelerate-") {}

  // train_accelerate alone (nproc 0) or under ddprun, its state and weights in root_/run.
  test::RankResult train(const std::string& run, int nproc, std::vector<std::string> flags,
                         std::vector<std::string> launch_flags = {}) {
    std::vector<std::string> argv;
    if (nproc > 0) {
      argv = {DDPRUN, "--nproc_per_node=" + std::to_string(nproc), "--standalone"};
      argv.insert(argv.end(), launch_flags.begin(), launch_flags.end());
    }
    argv.push_back(TRAIN_ACCELERATE);
    for (const std::string flag : {"--limit-train", "--limit-test", "--epochs"}) {
      if (std::find(flags.begin(), flags.end(), flag) == flags.end()) {
        flags.push_back(flag);
        flags.push_back(flag == "--epochs" ? "1" : flag == "--limit-train" ? "1024" : "300");
      }
    }
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const char* dir : {"state", "out"}) {
      argv.push_back(std::string("--") + dir + "-dir");
      argv.push_back((root_ / run / dir).string());
    }
    return test::run_command(argv, {}, 240s);
  }

  // The trained weights (parameters and buffers) of a run.
  std::vector<at::Tensor> weights(const std::string& run, bool sync_bn = false) {
    Net net(sync_bn);
    load_state_dict(net, (root_ / run / "out" / "model.safetensors").string());
    std::vector<at::Tensor> tensors;
    for (const auto& p : net->parameters()) tensors.push_back(p.detach().clone());
    for (const auto& b : net->buffers()) tensors.push_back(b.clone());
    return tensors;
  }

  // The largest difference of two runs' tensors, relative to each tensor's largest magnitude.
  static double max_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    EXPECT_EQ(a.size(), b.size());
    double most = 0;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      // Relative to the tensor's largest magnitude: the running variances are in the tens.
      const auto x = a[i].to(torch::kDouble), y = b[i].to(torch::kDouble);
      most = std::max(most, (x - y).abs().max().item<double>() / std::max(x.abs().max().item<double>(), 1e-12));
    }
    return most;
  }
};

// The same global batch (64 alone, 32 on each of 2 ranks) over the same samples: with
// SyncBatchNorm and no dropout each step's averaged gradient is the one-process gradient but for
// float rounding (the sums run in another order), so after 4 steps the weights agree within 1e-5
// of each tensor's largest magnitude (measured: 6.7e-7 after 1 step, 2.1e-6 after 4). Longer runs
// drift apart as the rounding compounds (after 16 steps bn2.bias, whose values are near 0,
// differs by 1% of its largest).
TEST_F(AccelerateExample, TheSameBinaryRunsAloneAndOnTwoAndThreeProcessesAndTwoEndWhereOneEnds) {
  const std::vector<std::string> same = {"--sync-bn", "1", "--dropout", "0", "--lr", "0.02", "--limit-train", "256"};
  auto flags = [&](const char* batch) {
    auto f = same;
    f.insert(f.end(), {"--batch-size", batch});
    return f;
  };
  auto alone = train("alone", 0, flags("64"));
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_NE(alone.output.find("training on 1 process(es), cpu, mixed precision no, 1 micro-step(s) per step"),
            std::string::npos)
      << alone.output;
  EXPECT_NE(alone.output.find("test accuracy"), std::string::npos) << alone.output;
  auto two = train("two", 2, flags("32"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("training on 2 process(es)"), std::string::npos) << two.output;
  const double difference = max_difference(weights("alone", true), weights("two", true));
  std::cout << "largest difference between the 1- and 2-process weights: " << difference << std::endl;
  EXPECT_LT(difference, 1e-5);
  torch::manual_seed(0);  // the example's seed: its weights before training
  Net initial(true, 0);
  auto before = initial->parameters();
  for (const auto& b : initial->buffers()) before.push_back(b);
  EXPECT_GT(max_difference(weights("alone", true), before), 1e-3);  // it did train
  // 3 ranks: 300 test images are 100 per rank, 1024 training images 342 per rank (2 padding),
  // 11 batches of 32.
  auto three = train("three", 3, {"--batch-size", "32"});
  ASSERT_EQ(three.exit_code, 0) << three.output;
  EXPECT_NE(three.output.find("of 300 images, step 11\n"), std::string::npos) << three.output;
}

// ddprun's --mixed_precision and --gradient_accumulation_steps reach the program unchanged: 2
// ranks of 512 images, batches of 64: 8 micro-steps per rank and epoch, 4 optimizer steps.
TEST_F(AccelerateExample, MixedPrecisionAndAccumulationComeFromTheLaunch) {
  auto run = train("bf16", 2, {}, {"--mixed_precision", "bf16", "--gradient_accumulation_steps", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("mixed precision bf16, 2 micro-step(s) per step"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("of 300 images, step 4\n"), std::string::npos) << run.output;
}

// Stopped mid-epoch and run again with the same command, the job ends bit for bit where an
// uninterrupted one ends (model, optimizer, sampler position, dropout's random state); stopped
// at 2 ranks, it resumes at 3 and finishes.
TEST_F(AccelerateExample, AStoppedRunResumesExactlyAndAtAnotherWorldSize) {
  const std::vector<std::string> two_epochs = {"--epochs", "2"};
  auto whole = train("whole", 2, two_epochs);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  auto with_stop = two_epochs;
  with_stop.insert(with_stop.end(), {"--stop-after", "5"});
  auto stopped = train("stopped", 2, with_stop);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  EXPECT_NE(stopped.output.find("stopped after step 5"), std::string::npos) << stopped.output;
  auto resumed = train("stopped", 2, two_epochs);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 5, epoch 1"), std::string::npos) << resumed.output;
  EXPECT_EQ(max_difference(weights("whole"), weights("stopped")), 0.0);

  auto elsewhere = train("elsewhere", 2, {"--stop-after", "3"});
  ASSERT_EQ(elsewhere.exit_code, 0) << elsewhere.output;
  auto on_three = train("elsewhere", 3, {});
  ASSERT_EQ(on_three.exit_code, 0) << on_three.output;
  EXPECT_NE(on_three.output.find("at step 3, epoch 1"), std::string::npos) << on_three.output;
  // The rest of the epoch (1024 - 3 steps x 2 ranks x 64 = 640 images) over 3 ranks: 214 each,
  // 4 batches of 64: the epoch ends at step 7.
  EXPECT_NE(on_three.output.find("step 7\n"), std::string::npos) << on_three.output;
}

}  // namespace
}  // namespace ddp
