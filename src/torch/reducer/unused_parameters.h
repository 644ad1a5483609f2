// find_unused_parameters: which parameters the forward's autograd graph does not reach, so that
// their buckets need not wait for gradients that will never come. A function of the graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "compat/torch_compat.h"

namespace ddp::detail {

// Indices into `accumulators` (each parameter's gradient accumulator) of the parameters that no
// path from `outputs` (the forward's tensors; undefined ones are skipped) leads to. A leaf output
// that requires a gradient reaches its own accumulator.
std::vector<std::size_t> unreached_parameters(const std::vector<at::Tensor>& outputs,
                                              const std::vector<compat::GradAccumulator>& accumulators);

}  // namespace ddp::detail
