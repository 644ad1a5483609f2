// SyncBatchNorm's arithmetic without communication: combining the ranks' statistics equals the
// statistics of the concatenated batch, and the gradient formulas equal autograd through batch norm.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "sync_batch_norm/statistics.h"

namespace ddp::detail {
namespace {

TEST(SyncBatchNormStatistics, CombiningUnevenShardsGivesTheConcatenatedBatchsMeanAndVariance) {
  torch::manual_seed(0);
  auto whole = torch::randn({10, 3, 4, 5}, torch::kDouble) * 3 + 1;
  std::vector<at::Tensor> rows;
  std::int64_t start = 0;
  for (std::int64_t n : {4, 0, 1, 5}) {  // an empty shard adds nothing
    rows.push_back(local_statistics(whole.narrow(0, start, n)));
    start += n;
  }
  const auto stats = combine_statistics(torch::stack(rows), at::kDouble);
  auto [var, mean] = torch::var_mean(whole, {0, 2, 3}, /*unbiased=*/false);
  EXPECT_EQ(stats.count, 10 * 4 * 5);
  EXPECT_TRUE(torch::allclose(stats.mean, mean, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(stats.var, var, 1e-12, 1e-12));
  EXPECT_TRUE(at::equal(local_statistics(whole.narrow(0, 0, 0)), torch::zeros({7}, torch::kDouble)));
}

TEST(SyncBatchNormStatistics, RunningStatisticsUseTheUnbiasedVariance) {
  GroupStatistics stats{torch::tensor({2.0}), torch::tensor({3.0}), 4};
  auto mean = torch::tensor({1.0}), var = torch::tensor({1.0});
  update_running_statistics(mean, var, stats, 0.5);
  EXPECT_DOUBLE_EQ(mean.item<double>(), 1.5);
  EXPECT_DOUBLE_EQ(var.item<double>(), 0.5 + 0.5 * 3.0 * 4 / 3);
}

TEST(SyncBatchNormStatistics, TheGradientFormulasAreBatchNormsOwn) {
  torch::manual_seed(1);
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{6, 3}, {4, 3, 5}, {2, 3, 4, 4}, {2, 3, 2, 3, 2}}) {
    auto x = torch::randn(shape, torch::kDouble).requires_grad_(true);
    auto w = torch::randn({3}, torch::kDouble).requires_grad_(true);
    auto b = torch::randn({3}, torch::kDouble).requires_grad_(true);
    auto dy = torch::randn(shape, torch::kDouble);
    const double eps = 1e-5;
    auto y = torch::batch_norm(x, w, b, {}, {}, /*training=*/true, 0.1, eps, false);
    y.backward(dy);
    const auto stats = combine_statistics(local_statistics(x.detach()).unsqueeze(0), at::kDouble);
    EXPECT_TRUE(torch::allclose(normalize(x.detach(), stats, w.detach(), b.detach(), eps), y, 1e-10, 1e-10));
    const auto invstd = (stats.var + eps).rsqrt();
    const auto sums = local_gradient_sums(dy, x.detach(), stats.mean);
    const auto gx = input_gradient(dy, x.detach(), stats.mean, invstd, w.detach(), sums, stats.count);
    EXPECT_TRUE(torch::allclose(gx, x.grad(), 1e-9, 1e-10)) << "shape " << x.sizes();
    EXPECT_TRUE(torch::allclose(sums.narrow(0, 0, 3), b.grad(), 1e-10, 1e-10));
    EXPECT_TRUE(torch::allclose(sums.narrow(0, 3, 3) * invstd, w.grad(), 1e-10, 1e-10));
  }
}

TEST(SyncBatchNormStatistics, TheOnePassInputGradientEqualsTheTwoPassFormToRounding) {
  // Contiguous float CPU tensors take one fused pass; a transposed copy of the same values takes
  // ATen's two addcmuls. Same arithmetic; ATen's vector kernels may fuse a multiply-add, so the
  // two agree to an ulp or two, not bit for bit.
  torch::manual_seed(2);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    for (const auto& shape : std::vector<std::vector<std::int64_t>>{{6, 3}, {4, 3, 5}, {2, 3, 4, 4}}) {
      auto x = torch::randn(shape, dtype), dy = torch::randn(shape, dtype), w = torch::randn({3}, dtype);
      const auto stats = combine_statistics(local_statistics(x).unsqueeze(0), dtype);
      const auto invstd = (stats.var + 1e-5).rsqrt();
      const auto sums = local_gradient_sums(dy, x, stats.mean);
      const auto fused = input_gradient(dy, x, stats.mean, invstd, w, sums, stats.count);
      // The same values, not contiguous: the first two dimensions stored the other way round.
      auto strided = [](const at::Tensor& t) { return t.transpose(0, 1).contiguous().transpose(0, 1); };
      ASSERT_FALSE(strided(x).is_contiguous());
      const auto two_pass = input_gradient(strided(dy), strided(x), stats.mean, invstd, w, sums, stats.count);
      const double tolerance = dtype == torch::kFloat ? 1e-6 : 1e-14;
      EXPECT_TRUE(torch::allclose(fused, two_pass, tolerance, tolerance))
          << "shape " << x.sizes() << ", " << dtype << ": differ by up to "
          << (fused - two_pass).abs().max().item<double>();
    }
  }
}

}  // namespace
}  // namespace ddp::detail
