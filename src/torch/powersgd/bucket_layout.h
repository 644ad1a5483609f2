// The bookkeeping of PowerSGD's memory per bucket: the rank a gradient is compressed at, and the
// layout the error and Q were memorized in (the parameters' shapes, in bucket order), which
// follows the bucket when DDP rebuilds it or a run resumes from a checkpoint with other buckets.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ddp/torch/comm_hooks.h"
#include "ddp/torch/powersgd.h"

namespace ddp::comm_hooks {

using Shapes = std::vector<std::vector<std::int64_t>>;

// The rank a gradient of this shape is compressed at (viewed as n x m), 0 when it is not.
inline std::int64_t compression_rank(at::IntArrayRef shape, const PowerSGDOptions& options) {
  if (shape.size() < 2) return 0;
  const std::int64_t numel = c10::multiply_integers(shape);
  if (numel == 0) return 0;
  const std::int64_t n = shape[0], m = numel / n;
  const std::int64_t r = std::min<std::int64_t>({n, m, options.matrix_approximation_rank});
  return static_cast<double>((n + m) * r) * options.min_compression_rate < static_cast<double>(numel) ? r : 0;
}

// The shapes of a bucket's parameters, in bucket order.
Shapes shapes_of(const GradBucket& bucket);

// Rearranges bucket `index`'s memorized error and Q from the parameter order they were memorized
// in to the bucket's present order `now` (DDP's initial buckets differ from its rebuilt ones, and a
// run resumed from a checkpoint starts with its initial buckets); then records the present order.
// Throws Error when the memorized shapes are damaged or are not a reordering of `now`.
void follow_layout(PowerSGDState& state, std::size_t index, const Shapes& now);

}  // namespace ddp::comm_hooks
