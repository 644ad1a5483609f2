// SyncBatchNorm's arithmetic, as functions of tensors (no communication): the statistics one
// rank contributes, their combination over the ranks, and the elementwise passes. Inputs are
// [N, C, *]; per-channel results are [C]. The exchanged values are float64, so that counts stay
// exact and the combination loses nothing; the rest is in the statistics' dtype (the input's, or
// float32 for 16-bit inputs).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ddp::detail {

// The dtype of the per-channel statistics for an input of `input`'s dtype.
at::ScalarType statistics_dtype(const at::Tensor& input);

// What a rank contributes: [2C + 1] float64 = mean (C), biased variance (C), count of values per
// channel (1). An empty input contributes zeros.
at::Tensor local_statistics(const at::Tensor& input);

struct GroupStatistics {
  at::Tensor mean;     // [C], statistics dtype
  at::Tensor var;      // [C], biased, statistics dtype
  std::int64_t count;  // values per channel over the group
};

// Combines `gathered` ([ranks, 2C + 1], every rank's local_statistics) weighting each rank by its
// count (rows with count 0 add nothing), in `dtype`.
GroupStatistics combine_statistics(const at::Tensor& gathered, at::ScalarType dtype);

// running = (1 - momentum) * running + momentum * statistic, the variance unbiased (count / (count - 1)).
// Undefined running tensors are left alone.
void update_running_statistics(at::Tensor& running_mean, at::Tensor& running_var, const GroupStatistics& stats,
                               double momentum);

// (input - mean) / sqrt(var + eps) * weight + bias (undefined weight / bias: 1 / 0).
at::Tensor normalize(const at::Tensor& input, const GroupStatistics& stats, const at::Tensor& weight,
                     const at::Tensor& bias, double eps);

// Backward, per rank: [2C] float64 = sum of grad_output (C), sum of grad_output * (input - mean) (C).
at::Tensor local_gradient_sums(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean);

// The input's gradient from the group's sums (`sums`: [2C], local_gradient_sums summed over the
// ranks) and count: (dy - sum_dy / n - (x - mean) * invstd^2 * sum_dy_xmu / n) * invstd * weight.
at::Tensor input_gradient(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
                          const at::Tensor& invstd, const at::Tensor& weight, const at::Tensor& sums,
                          std::int64_t count);

}  // namespace ddp::detail
