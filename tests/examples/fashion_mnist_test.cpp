// The main job end to end: 2 ranks under ddprun on a subset of the real data. Loss falls, a
// stopped run resumes from its checkpoint at the same sampler position and ends exactly where an
// uninterrupted run ends, with the same metrics, and a damaged checkpoint is named and passed over.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "ddp/torch/checkpoint.h"
#include "example_test.h"
#include "final_model.h"
#include "sample_log.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::read_sample_log;
using test::SampleLogLine;
using test::samples_per_epoch;

struct TrainRun {
  int exit_code;
  std::string output;
};

class FashionMnist : public test::ExampleTest {
 protected:
  FashionMnist() : ExampleTest("ddp-example-") {}

  // ddprun --nproc_per_node=2 train_fashion_mnist <small run flags> <extra>
  TrainRun train(const std::string& dir, std::vector<std::string> extra = {}, int nproc = 2) {
    std::vector<std::string> argv = {DDPRUN,
                                     "--nproc_per_node=" + std::to_string(nproc),
                                     "--standalone",
                                     TRAIN_FASHION_MNIST,
                                     "--epochs",
                                     "2",
                                     "--limit-train",
                                     "1024",
                                     "--limit-test",
                                     "500",
                                     "--log-every",
                                     "4",
                                     "--checkpoint-dir",
                                     (root_ / dir).string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto result = test::run_command(argv, {}, 240s);
    return {result.signal ? 128 + result.signal : result.exit_code, result.output};
  }

  std::vector<std::string> lines(const fs::path& file) { return lines_of(file); }
  static std::vector<std::string> lines_of(const fs::path& file) {
    std::ifstream in(file);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

  static std::vector<std::string> columns(const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream in(line);
    for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
    return cells;
  }

  std::vector<at::Tensor> final_model(const std::string& dir) {
    auto tensors = test::final_model((root_ / dir).string());
    EXPECT_FALSE(tensors.empty()) << "no checkpoint in " << dir;
    return tensors;
  }
};

TEST_F(FashionMnist, LearnsStopsResumesExactlyAndPassesOverADamagedCheckpoint) {
  // An uninterrupted run.
  auto whole = train("whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_NE(whole.output.find("training on 2 processes (gloo, cpu), 1024 training and 500 test images"),
            std::string::npos)
      << whole.output;
  EXPECT_NE(whole.output.find("[0]:epoch 2/2: train loss"), std::string::npos) << whole.output;
  EXPECT_EQ(whole.output.find("[1]:epoch"), std::string::npos) << "only rank 0 reports:\n" << whole.output;
  // Each epoch's straggler report (which rank, if any, held the others back).
  EXPECT_TRUE(std::regex_search(
      whole.output, std::regex(R"(\[0\]:  (no straggler over \d+ steps|rank \d \(host .*\) is the straggler))")))
      << whole.output;
  EXPECT_NE(whole.output.find("ddprun: the job succeeded; its last straggler report: "), std::string::npos)
      << whole.output;
  auto csv = lines(root_ / "whole" / "metrics.csv");
  ASSERT_EQ(csv.size(), 3u) << whole.output;
  EXPECT_EQ(csv[0], "epoch,train_loss,test_loss,test_accuracy,lr,seconds,samples_per_second");
  const double loss1 = std::stod(csv[1].substr(csv[1].find(',') + 1));
  const double loss2 = std::stod(csv[2].substr(csv[2].find(',') + 1));
  EXPECT_LT(loss2, loss1 * 0.9) << "the training loss did not fall";
  const double accuracy = std::stod(csv[2].substr(csv[2].find(',', csv[2].find(',', csv[2].find(',') + 1) + 1) + 1));
  EXPECT_GT(accuracy, 0.5) << csv[2];
  std::ifstream svg(root_ / "whole" / "metrics.svg");
  std::string plot((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(plot.find("<svg"), std::string::npos);
  EXPECT_NE(plot.find("Test accuracy"), std::string::npos);

  // The same run stopped in the middle of epoch 2 (8 steps per epoch), then started again.
  auto first = train("resumed", {"--stop-after", "11"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("stopping after step 11"), std::string::npos) << first.output;
  auto second = train("resumed");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from " + (root_ / "resumed" / "checkpoint-000000000011.ckpt").string() +
                               ": epoch 2, step 11, sampler position 192 of 512"),
            std::string::npos)
      << second.output;
  auto a = final_model("whole"), b = final_model("resumed");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i])) << "tensor " << i << " differs between the uninterrupted and the resumed run";
  }
  // Every number the resumed run reports is the uninterrupted run's: the resumed epoch's train
  // loss included (each rank's share of it was in the checkpoint). Time varies from run to run;
  // what it measures does not: seconds x images per second is the whole epoch's 1024 images.
  auto resumed_csv = lines(root_ / "resumed" / "metrics.csv");
  ASSERT_EQ(resumed_csv.size(), csv.size()) << second.output;
  for (std::size_t row = 1; row < csv.size(); ++row) {
    const auto w = columns(csv[row]), r = columns(resumed_csv[row]);
    ASSERT_EQ(w.size(), 7u);
    ASSERT_EQ(r.size(), 7u);
    for (std::size_t c = 0; c < 5; ++c) {
      EXPECT_EQ(r[c], w[c]) << "column " << c << " of epoch " << row << ":\n" << csv[row] << "\n" << resumed_csv[row];
    }
    for (const auto& cells : {w, r}) {
      EXPECT_NEAR(std::stod(cells[5]) * std::stod(cells[6]), 1024, 1024 * 0.01) << csv[row] << "\n" << resumed_csv[row];
    }
  }

  // A damaged newest checkpoint: named, passed over, and the older one resumed.
  Checkpoints checkpoints({.directory = (root_ / "resumed").string()});
  auto files = checkpoints.list();
  ASSERT_EQ(files.size(), 2u);
  fs::resize_file(files[0], fs::file_size(files[0]) / 2);
  auto third = train("resumed", {"--epochs", "3"});
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_NE(third.output.find("checkpoint \"" + files[0] + "\" cannot be used (truncated"), std::string::npos)
      << third.output;
  EXPECT_NE(third.output.find("resumed from " + files[1]), std::string::npos) << third.output;
}

TEST_F(FashionMnist, ResumesAtAnotherWorldSizeAndTrainsOnEverySampleOnce) {
  // 2 ranks stop after 5 of epoch 1's 8 steps (640 samples); 3 ranks take the other 384.
  const auto ids2 = root_ / "ids-at-2", ids3 = root_ / "ids-at-3";
  fs::create_directories(ids2);
  fs::create_directories(ids3);
  auto first = train("resized", {"--stop-after", "5", "--sample-log", ids2.string()}, 2);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = train("resized", {"--sample-log", ids3.string()}, 3);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("[0]:resumed at world size 3 (written at 2): sample 640 of 1,024 of epoch 1"),
            std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("sampler position 0 of 128"), std::string::npos) << second.output;
  std::vector<SampleLogLine> lines = read_sample_log(ids2);
  for (auto& line : read_sample_log(ids3)) {
    line.round = 1;  // the second run resumed the first
    lines.push_back(std::move(line));
  }
  const auto seen = samples_per_epoch(lines);
  ASSERT_EQ(seen.count(0), 1u);
  const auto& epoch = seen.at(0);
  EXPECT_EQ(epoch.size(), 1024u) << "a sample of the interrupted epoch was never trained on";
  for (const auto& [id, times] : epoch) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 1024);
    EXPECT_EQ(times, 1) << "sample " << id << " trained on " << times << " times in the interrupted epoch";
  }
  // The next epoch, at 3 ranks from its start: 342 each, the last 2 of them the padding.
  long total = 0;
  for (const auto& [id, times] : seen.at(1)) total += times;
  EXPECT_EQ(seen.at(1).size(), 1024u);
  EXPECT_EQ(total, 1026);
  EXPECT_EQ(lines_of(root_ / "resized" / "metrics.csv").size(), 3u) << second.output;
}

// --amp on the CPU: the forward and the loss run under bfloat16 autocast. The run learns about as
// the float32 one does but is not bit-identical to it (the autocast took effect), and it resumes
// from a float32 run's checkpoint (which holds no GradScaler state: the CPU uses none).
TEST_F(FashionMnist, AmpTrainsUnderBfloat16AutocastAndResumesAFloat32Checkpoint) {
  auto fp32 = train("fp32", {"--epochs", "1"});
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  auto amp = train("amp", {"--epochs", "1", "--amp"});
  ASSERT_EQ(amp.exit_code, 0) << amp.output;
  EXPECT_NE(amp.output.find("1 epochs of 8 steps, batch 64 per rank, bfloat16 autocast"), std::string::npos)
      << amp.output;
  const auto fp32_csv = lines(root_ / "fp32" / "metrics.csv"), amp_csv = lines(root_ / "amp" / "metrics.csv");
  ASSERT_EQ(fp32_csv.size(), 2u) << fp32.output;
  ASSERT_EQ(amp_csv.size(), 2u) << amp.output;
  const double fp32_loss = std::stod(columns(fp32_csv[1])[1]), amp_loss = std::stod(columns(amp_csv[1])[1]);
  EXPECT_NEAR(amp_loss, fp32_loss, 0.05 * fp32_loss) << fp32_csv[1] << "\n" << amp_csv[1];
  auto a = final_model("fp32"), b = final_model("amp");
  ASSERT_EQ(a.size(), b.size());
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::isfinite(b[i]).all().item<bool>()) << "tensor " << i;
    differs = differs || !at::equal(a[i], b[i]);
  }
  EXPECT_TRUE(differs) << "--amp trained exactly as float32: autocast had no effect";

  auto resumed = train("fp32", {"--epochs", "2", "--amp"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("[0]:epoch 2/2: train loss"), std::string::npos) << resumed.output;
}

TEST_F(FashionMnist, GradientAccumulationAndBadInput) {
  auto accum = train("accum", {"--accum", "2", "--epochs", "1"});
  ASSERT_EQ(accum.exit_code, 0) << accum.output;
  EXPECT_NE(accum.output.find("1 epochs of 4 steps, batch 64 per rank x 2 micro-batches"), std::string::npos)
      << accum.output;
  auto help = test::run_command({TRAIN_FASHION_MNIST, "--help"}, {}, 30s);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--checkpoint-dir DIR"), std::string::npos) << help.output;
  auto bad = test::run_command({TRAIN_FASHION_MNIST, "--epochs", "many"}, {}, 30s);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--epochs takes an integer >= 1, not 'many'"), std::string::npos) << bad.output;
  auto missing = test::run_command(
      {TRAIN_FASHION_MNIST, "--data-dir", "/nonexistent", "--checkpoint-dir", (root_ / "missing").string()}, {}, 60s);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("dataset-fashion-mnist"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("--data-dir"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace ddp
