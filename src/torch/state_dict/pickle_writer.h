// Writes the data.pkl of torch.save's zip format for a state dict, as Python's torch.save writes
// it: protocol 2, a collections.OrderedDict of tensors, each rebuilt by
// torch._utils._rebuild_tensor_v2 over a storage named by the persistent id
// ('storage', torch.<Type>Storage, "<index>", "cpu", numel). Python loads it with torch.load,
// weights_only=True included. No LibTorch.
#pragma once

#include <string>

#include "state_dict/weights.h"

namespace ddp::detail::pickle {

// Storage i of `weights` is named "i" (the zip entry data/i).
std::string write_state_dict(const weights::Weights& weights);

}  // namespace ddp::detail::pickle
