// SyncBatchNorm's training pass over a group of more than one rank, as an autograd function:
// forward normalizes with the group's statistics (and updates the running ones), backward
// combines the group's gradient sums (statistics.h for the arithmetic, exchange.h for the
// communication).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "ddp/process_group.h"

namespace ddp::detail {

// Throws InvalidArgument when the group holds fewer than 2 values per channel in total (on every
// rank alike), and the group's errors.
at::Tensor sync_batch_norm(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                           at::Tensor running_mean, at::Tensor running_var, double momentum, double eps,
                           std::shared_ptr<ProcessGroup> group);

}  // namespace ddp::detail
