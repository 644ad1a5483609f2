// A tensor's shape as errors print it: "[4, 16]".
#pragma once

#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>

namespace ddp::detail {

inline std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace ddp::detail
