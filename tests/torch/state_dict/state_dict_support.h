// What the state dict tests share: tensors of every dtype and layout
// whose values follow a formula that pytorch_peer.py repeats in Python, and reading a file.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "ddp/torch/state_dict.h"
#include "support/launch.h"  // TempDir

namespace ddp::test {

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// n values of `dtype`, the same as pytorch_peer.py's values(n, dtype).
inline at::Tensor formula(std::int64_t n, at::ScalarType dtype) {
  auto i = torch::arange(n, torch::kDouble);
  if (dtype == at::kBool) return (i.remainder(3) == 0);
  if (at::isFloatingType(dtype)) return (i * 0.37 - 5.25).to(dtype);
  if (dtype == at::kByte) return (i * 7).remainder(256).to(dtype);
  return (i * 7 - 20).to(dtype);
}

inline const std::vector<at::ScalarType>& all_dtypes() {
  static const std::vector<at::ScalarType> types = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kChar,
                                                    at::kByte,  at::kShort,  at::kInt,  at::kLong,     at::kBool};
  return types;
}

// Every dtype, then the layouts: a transposed view, an offset slice, an expanded (stride 0)
// tensor, a zero-size one, a 0-dim one, and two names for one tensor. pytorch_peer.py checks
// and writes the same dict.
inline StateDict layouts() {
  StateDict d;
  for (auto dtype : all_dtypes())
    d.insert(std::string("dtype.") + c10::toString(dtype), formula(12, dtype).view({3, 4}));
  const auto base = formula(12, at::kFloat).view({3, 4});
  d.insert("transposed", base.t());
  d.insert("slice", formula(20, at::kFloat).narrow(0, 5, 10));
  d.insert("expanded", formula(3, at::kFloat).view({3, 1}).expand({3, 4}));
  d.insert("empty", torch::empty({0, 3}));
  d.insert("scalar", torch::tensor(2.5, torch::kDouble));
  d.insert("shared.a", base);
  d.insert("shared.b", base);
  return d;
}

}  // namespace ddp::test
