// Making the ranks' models agree: checking that they have the same parameters, and copying
// rank 0's values to everyone.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/process_group.h"

namespace ddp::detail {

// Collective. Throws MismatchError naming the first parameter whose name, shape or dtype differs
// between ranks (with its description on each rank), or the ranks' differing counts. The
// exchange uses tensors on the parameters' device (nccl takes CUDA tensors only).
void check_same_parameters(const std::shared_ptr<ProcessGroup>& group, const std::vector<std::string>& names,
                           const std::vector<at::Tensor>& params);

// Collective: every rank ends with `root`'s values, sent as one flat buffer per dtype/device.
void broadcast_coalesced(const std::shared_ptr<ProcessGroup>& group, const std::vector<at::Tensor>& tensors,
                         int root = 0);

}  // namespace ddp::detail
