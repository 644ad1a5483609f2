// ddp::SyncBatchNorm against PyTorch's nn.SyncBatchNorm, each on 2 ranks over gloo, on the same inputs:
// outputs, input gradients, weight and bias gradients, running mean and variance and num_batches_tracked,
// step by step, affine and not, exponential and cumulative momentum, a rank with an empty batch.
// pytorch_sync_batch_norm_peer.py runs PyTorch's side, once per reference PyTorch. PyTorch runs
// SyncBatchNorm on accelerators only: the peer gives PyTorch's module and autograd function (their
// collectives, count weighting, momentum, unbiased running variance) CPU kernels written from the CUDA
// ones in float64, so the comparison allows float32 rounding (kTolerance). PyTorch 1.13's module checks
// input.is_cuda, which no CPU run passes: that peer is skipped, saying so.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "ddp/ddp.h"
#include "support/float_file.h"
#include "support/multiprocess.h"
#include "support/reference_pythons.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

// Relative to max(1, |PyTorch's value|): ddp's group statistics are float64 rounded once, the peer's
// kernels round mean and invstd to float32 before normalizing; a few float32 ulps apart (measured: up
// to 2.2e-7 against PyTorch 2.15).
constexpr double kTolerance = 1e-6;

struct Case {
  std::string name;
  std::int64_t channels;
  std::vector<std::int64_t> rows;  // per rank
  std::vector<std::int64_t> tail;  // the shape after [N, C]
  bool affine;
  c10::optional<double> momentum;  // none: cumulative average
  int steps;
};

// As pytorch_sync_batch_norm_peer.py's CASES, in the same order (the index enters the inputs).
const std::vector<Case> kCases = {
    {"affine_2d", 3, {3, 5}, {4, 2}, true, 0.1, 3},
    {"plain_1d", 4, {4, 2}, {6}, false, 0.3, 3},
    {"affine_cumulative", 5, {2, 3}, {}, true, c10::nullopt, 3},
    {"plain_empty_rank", 2, {0, 4}, {3, 3}, false, 0.1, 2},
    {"affine_empty_rank", 3, {5, 0}, {7}, true, c10::nullopt, 2},
};

// The peer's pattern(): ((k * multiplier + offset) mod prime) / denominator - shift, exact in float32.
at::Tensor pattern(std::vector<std::int64_t> shape, std::int64_t multiplier, std::int64_t offset, std::int64_t prime,
                   double denominator, double shift) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  const auto k = torch::arange(n, torch::kLong);
  return (torch::remainder(k * multiplier + offset, prime).to(torch::kFloat) / denominator - shift).reshape(shape);
}

// One case of the peer's rank_main, through ddp::SyncBatchNorm: what it writes, in its order.
at::Tensor run_case(const Case& k, std::int64_t index, int rank) {
  SyncBatchNorm bn(torch::nn::BatchNormOptions(k.channels).affine(k.affine).momentum(k.momentum));
  if (k.affine) {
    torch::NoGradGuard no_grad;
    bn->weight.copy_(pattern({k.channels}, 3, index, 7, 4.0, -0.5));
    bn->bias.copy_(pattern({k.channels}, 5, index, 11, 8.0, 0.5));
  }
  std::vector<at::Tensor> parts;
  for (std::int64_t step = 0; step < k.steps; ++step) {
    std::vector<std::int64_t> shape{k.rows[rank], k.channels};
    shape.insert(shape.end(), k.tail.begin(), k.tail.end());
    auto x = pattern(shape, 37, 11 * rank + 5 * step + 3 * index, 101, 16.0, 3.0).requires_grad_(true);
    const auto dy = pattern(shape, 53, 7 * rank + 13 * step + index, 67, 32.0, 1.0);
    if (k.affine) bn->zero_grad();  // without affine, weight and bias are undefined: nothing to zero
    auto y = bn->forward(x);
    y.backward(dy);
    parts.push_back(y.detach().flatten());
    parts.push_back(x.grad().defined() ? x.grad().flatten() : torch::zeros({x.numel()}));
    if (k.affine) {  // copies: the next step's zero_grad and backward write into these tensors
      for (auto* p : {&bn->weight, &bn->bias}) {
        parts.push_back(p->grad().defined() ? p->grad().clone() : torch::zeros({k.channels}));
      }
    }
    parts.push_back(bn->running_mean.clone());
    parts.push_back(bn->running_var.clone());
    parts.push_back(bn->num_batches_tracked.to(torch::kFloat).view({1}));
  }
  return torch::cat(parts).contiguous();
}

// Every case, each rank writing PREFIX.CASE.RANK.bin; a case that throws (on every rank alike, before
// any collective) fails and writes nothing, and the next one runs.
void run_cases(int rank, const std::string& prefix) {
  torch::set_num_threads(1);
  init_process_group("gloo", {.timeout = 60s});
  for (std::size_t c = 0; c < kCases.size(); ++c) {
    try {
      const auto all = run_case(kCases[c], static_cast<std::int64_t>(c), rank);
      std::ofstream(prefix + "." + kCases[c].name + "." + std::to_string(rank) + ".bin", std::ios::binary)
          .write(static_cast<const char*>(all.data_ptr()), static_cast<std::streamsize>(all.nbytes()));
    } catch (const std::exception& e) {
      ADD_FAILURE() << kCases[c].name << ": ddp::SyncBatchNorm threw: " << e.what();
    }
  }
  destroy_process_group();
}

class SyncBatchNormPyTorch : public ::testing::TestWithParam<ReferencePython> {};

TEST_P(SyncBatchNormPyTorch, OutputsGradientsAndRunningStatisticsMatchPyTorchs) {
  const std::string prefix = ::testing::TempDir() + "/sbn-peer-" + std::to_string(::getpid());
  if (!is_rank_process()) {
    const auto peer = run_command(
        {GetParam().path, std::string(DDP_SOURCE_DIR) + "/tests/torch/sync_batch_norm/pytorch_sync_batch_norm_peer.py",
         "--out", prefix + "-pytorch"},
        {}, 180s);
    if (peer.exit_code == 3 && peer.signal == 0) GTEST_SKIP() << peer.output;  // 1.13: no CPU SyncBatchNorm
    ASSERT_TRUE(peer.ok()) << peer.output;
  }
  run_ranks(2, [](int rank, int) { run_cases(rank, std::getenv("SBN_PEER_OUT")); },
            {.env = {{"SBN_PEER_OUT", prefix + "-ddp"}}});
  if (is_rank_process()) return;
  double worst = 0;
  for (const auto& k : kCases) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string suffix = "." + k.name + "." + std::to_string(rank) + ".bin";
      const auto theirs = read_floats(prefix + "-pytorch" + suffix), ours = read_floats(prefix + "-ddp" + suffix);
      ::unlink((prefix + "-pytorch" + suffix).c_str());
      ::unlink((prefix + "-ddp" + suffix).c_str());
      if (ours.empty()) {
        ADD_FAILURE() << k.name << ", rank " << rank << ": ddp wrote nothing (its error is in the ranks' output)";
        continue;
      }
      ASSERT_EQ(ours.size(), theirs.size()) << k.name << ", rank " << rank;
      double case_worst = 0;
      std::size_t at = 0;
      for (std::size_t i = 0; i < ours.size(); ++i) {
        const double diff = std::abs(double(ours[i]) - double(theirs[i])) / std::max(1.0, std::abs(double(theirs[i])));
        if (diff > case_worst) case_worst = diff, at = i;
      }
      EXPECT_LE(case_worst, kTolerance) << k.name << ", rank " << rank << ", element " << at << ": ddp " << ours[at]
                                        << ", PyTorch " << theirs[at];
      worst = std::max(worst, case_worst);
    }
  }
  std::cout << "largest relative difference from PyTorch " << GetParam().name << ": " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(PyTorch, SyncBatchNormPyTorch, ::testing::ValuesIn(reference_pythons()), reference_name);

}  // namespace
}  // namespace ddp::test
