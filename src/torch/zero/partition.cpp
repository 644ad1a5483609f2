// PyTorch's sorted-greedy partition of ZeroRedundancyOptimizer (_partition_parameters).
#include <algorithm>
#include <numeric>

#include "ddp/error.h"
#include "ddp/torch/zero_redundancy_optimizer.h"
#include "util/strings.h"

namespace ddp::detail {

std::vector<std::vector<std::vector<std::size_t>>> partition_parameters(
    const std::vector<std::vector<std::int64_t>>& numels, int world_size) {
  if (world_size < 1)
    throw InvalidArgument(cat("partition_parameters: the world size must be at least 1, got ", world_size));
  std::vector<std::vector<std::vector<std::size_t>>> partition(static_cast<std::size_t>(world_size),
                                                               std::vector<std::vector<std::size_t>>(numels.size()));
  std::vector<std::int64_t> totals(static_cast<std::size_t>(world_size), 0);  // running, over all groups
  for (std::size_t g = 0; g < numels.size(); ++g) {
    std::vector<std::size_t> order(numels[g].size());
    std::iota(order.begin(), order.end(), 0);
    // Python's sorted(..., reverse=True) is stable: equal sizes keep their order.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return numels[g][a] > numels[g][b]; });
    for (std::size_t i : order) {
      // The first rank with the smallest total (PyTorch's _get_min_index).
      const auto rank = static_cast<std::size_t>(std::min_element(totals.begin(), totals.end()) - totals.begin());
      partition[rank][g].push_back(i);
      totals[rank] += numels[g][i];
    }
  }
  return partition;
}

}  // namespace ddp::detail
