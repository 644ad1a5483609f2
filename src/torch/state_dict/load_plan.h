// Which of a file's tensors go into which of a module's, by name: PyTorch's load_state_dict
// rules (missing keys, unexpected keys, shape mismatches), the caller's prefix, and DDP's
// "module." prefix stripped when every key of the file has it and no key of the module does.
// A pure function of names, shapes and types.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddp/torch/state_dict.h"

namespace ddp::detail {

struct TensorInfo {
  std::string name;
  std::vector<std::int64_t> sizes;
  std::string dtype;  // "float32", ...
};

struct LoadPlan {
  LoadReport report;                                        // its format and loaded count are the caller's
  std::vector<std::pair<std::size_t, std::size_t>> copies;  // (module index, file index), in the module's order
};

LoadPlan plan_load(const std::vector<TensorInfo>& module, const std::vector<TensorInfo>& file,
                   const std::string& prefix);

}  // namespace ddp::detail
