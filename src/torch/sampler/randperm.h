// The two shuffles behind torch.randperm on the CPU, exposed so that each can be tested at any
// size (torch_randperm picks one by size and RandpermCompat, as PyTorch does).
#pragma once

#include <cstdint>
#include <vector>

namespace ddp::detail {

// PyTorch's classic loop: perm = 0..n-1, then for i in [0, n-1) swap perm[i] with
// perm[i + random() % (n - i)] (random(): the generator's next 32-bit draw).
std::vector<std::int64_t> randperm_swap32(std::int64_t n, std::uint64_t seed);

// PyTorch 2.7's loop for large n: for i in [0, n): z = random64() % (i + 1); perm[i] = perm[z];
// perm[z] = i (random64(): two 32-bit draws, the first in the high half).
std::vector<std::int64_t> randperm_inside_out64(std::int64_t n, std::uint64_t seed);

}  // namespace ddp::detail
