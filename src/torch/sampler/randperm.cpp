// torch.randperm on the CPU, bit for bit: LibTorch's own generator (at::CPUGeneratorImpl, the
// mt19937 behind torch.Generator) driving the two shuffles PyTorch's randperm_cpu has used
// (aten/src/ATen/native/TensorFactories.cpp).
#include "sampler/randperm.h"

#include <ATen/CPUGeneratorImpl.h>

#include <numeric>
#include <utility>

namespace ddp::detail {

// torch.Generator().manual_seed(seed) and CPUGeneratorImpl(seed) leave the engine in one state.

std::vector<std::int64_t> randperm_swap32(std::int64_t n, std::uint64_t seed) {
  at::CPUGeneratorImpl generator(seed);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  for (std::int64_t i = 0; i < n - 1; ++i) {
    const std::int64_t z = static_cast<std::int64_t>(generator.random()) % (n - i);
    std::swap(perm[i], perm[z + i]);
  }
  return perm;
}

std::vector<std::int64_t> randperm_inside_out64(std::int64_t n, std::uint64_t seed) {
  at::CPUGeneratorImpl generator(seed);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto z = static_cast<std::int64_t>(generator.random64() % static_cast<std::uint64_t>(i + 1));
    perm[i] = perm[z];
    perm[z] = i;
  }
  return perm;
}

}  // namespace ddp::detail
