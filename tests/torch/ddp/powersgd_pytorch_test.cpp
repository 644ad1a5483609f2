// ddp's PowerSGD hook against PyTorch's powerSGD_hook on the same buckets: powersgd_peer.py runs
// PyTorch's side (2 ranks over gloo) through CONFIGS; this file runs the same table through ddp's
// hook at 2 ranks, launching both buckets before waiting for them as DDP does. Every result must
// match to 1e-5 (relative to max(1, |PyTorch's value|)): plain all-reduce before
// start_powerSGD_iter, error feedback over several steps, warm start and fresh random Qs from the
// same seed (ddp reproduces numpy's and torch's generators), the QR path (rank 3), batching of
// same-shaped matrices, a bias and a matrix below min_compression_rate left uncompressed. Against every
// reference PyTorch (support/reference_pythons.h: Debian's 1.13, PyPI's 2.x).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "ddp/ddp.h"
#include "ddp/torch/powersgd.h"
#include "support/float_file.h"
#include "support/multiprocess.h"
#include "support/reference_pythons.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;
using comm_hooks::PowerSGDOptions;

const std::vector<std::vector<std::vector<std::int64_t>>> kBuckets = {{{16, 12}, {16}, {3, 4}, {16, 12}, {8, 2, 3, 3}},
                                                                      {{10, 20}, {10}}};

// powersgd_peer.py's CONFIGS.
const std::vector<std::pair<int, PowerSGDOptions>> kConfigs = {
    {5,
     {.matrix_approximation_rank = 1,
      .start_powerSGD_iter = 2,
      .min_compression_rate = 2,
      .use_error_feedback = true,
      .warm_start = true,
      .orthogonalization_epsilon = 0,
      .random_seed = 0,
      .batch_tensors_with_same_shape = false}},
    {4,
     {.matrix_approximation_rank = 3,
      .start_powerSGD_iter = 2,
      .min_compression_rate = 1,
      .use_error_feedback = true,
      .warm_start = false,
      .orthogonalization_epsilon = 1e-8,
      .random_seed = 12345,
      .batch_tensors_with_same_shape = true}},
    {3,
     {.matrix_approximation_rank = 2,
      .start_powerSGD_iter = 0,
      .min_compression_rate = 1.5,
      .use_error_feedback = false,
      .warm_start = false,
      .orthogonalization_epsilon = 0,
      .random_seed = 7,
      .batch_tensors_with_same_shape = false}},
    {4,
     {.matrix_approximation_rank = 2,
      .start_powerSGD_iter = 2,
      .min_compression_rate = 1,
      .use_error_feedback = true,
      .warm_start = true,
      .orthogonalization_epsilon = 0,
      .random_seed = 99,
      .batch_tensors_with_same_shape = true}},
};

// powersgd_peer.py's values().
at::Tensor values(std::int64_t numel, int rank, int step, int bucket, int config) {
  auto k = torch::arange(numel, torch::kFloat64);
  const double c = 1.3 * rank + 0.71 * step + 2.1 * bucket + 0.5 * config;
  return (torch::sin(k * 0.37 + c) * (1 + 0.5 * torch::cos(k * 0.11 - c))).to(torch::kFloat32);
}

class PowerSgdPytorch : public ::testing::TestWithParam<ReferencePython> {};

TEST_P(PowerSgdPytorch, HookMatchesPyTorchsPowerSgdHook) {
  const std::string base = ::testing::TempDir() + "/powersgd-" + std::to_string(::getpid());
  const std::string theirs_path = base + "-pytorch.bin", ours_path = base + "-ddp.bin";
  if (!is_rank_process()) {
    const auto peer = run_command(
        {GetParam().path, std::string(DDP_SOURCE_DIR) + "/tests/torch/ddp/powersgd_peer.py", "--out", theirs_path}, {},
        180s);
    ASSERT_TRUE(peer.ok()) << peer.output;
  }
  run_ranks(
      2,
      [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    std::vector<at::Tensor> results;
    for (int c = 0; c < static_cast<int>(kConfigs.size()); ++c) {
      auto state = std::make_shared<comm_hooks::PowerSGDState>(kConfigs[c].second);
      auto hook = comm_hooks::powersgd(state);
      for (int step = 0; step < kConfigs[c].first; ++step) {
        std::vector<GradBucket> buckets;
        for (std::size_t b = 0; b < kBuckets.size(); ++b) {
          std::vector<at::Tensor> params;
          std::int64_t numel = 0;
          for (const auto& shape : kBuckets[b]) {
            params.push_back(torch::empty(shape));
            numel += params.back().numel();
          }
          buckets.emplace_back(b, b + 1 == kBuckets.size(), values(numel, rank, step, static_cast<int>(b), c), params,
                               group);
        }
        std::vector<std::shared_ptr<Future>> futures;
        for (auto& bucket : buckets) futures.push_back(hook(bucket));
        for (auto& future : futures) results.push_back(future->wait().clone());
      }
      results.push_back(
          torch::tensor({static_cast<float>(state->iter()), static_cast<float>(state->numel_before_compression()),
                         static_cast<float>(state->numel_after_compression())}));
    }
    if (rank != 0) return;
    auto all = torch::cat(results).contiguous();
    std::ofstream(std::getenv("POWERSGD_OUT"), std::ios::binary)
        .write(static_cast<const char*>(all.data_ptr()), static_cast<std::streamsize>(all.nbytes()));
      },
      {.env = {{"POWERSGD_OUT", ours_path}}});
  if (is_rank_process()) return;
  const auto theirs = read_floats(theirs_path), ours = read_floats(ours_path);
  ::unlink(theirs_path.c_str());
  ::unlink(ours_path.c_str());
  ASSERT_EQ(ours.size(), theirs.size()) << "ddp wrote " << ours.size() << " floats, PyTorch " << theirs.size();
  ASSERT_GT(ours.size(), 1000u);
  double worst = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double scale = std::max(1.0, std::abs(static_cast<double>(theirs[i])));
    const double diff = std::abs(static_cast<double>(ours[i]) - theirs[i]) / scale;
    ASSERT_LE(diff, 1e-5) << "element " << i << ": ddp " << ours[i] << ", PyTorch " << theirs[i];
    worst = std::max(worst, diff);
  }
  std::cout << "largest relative difference from PyTorch " << GetParam().name << ": " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(PyTorch, PowerSgdPytorch, ::testing::ValuesIn(reference_pythons()), reference_name);

}  // namespace
}  // namespace ddp::test
