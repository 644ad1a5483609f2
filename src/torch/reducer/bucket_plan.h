// Which parameters' gradients travel together: a pure function of their sizes, types and the
// order in which their gradients are expected to become ready.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp::detail {

struct ParamSpec {
  std::size_t bytes = 0;
  int group = 0;  // parameters of different groups (dtype, device) never share a bucket
};

using BucketPlan = std::vector<std::vector<std::size_t>>;  // per bucket: parameter indices

// Fills buckets walking `order` (parameter indices, in expected ready order): a bucket closes
// as soon as it holds at least `first_cap_bytes` (the first bucket of each group, so that the
// first all-reduce starts early) or `cap_bytes` (the others), so a parameter larger than the cap
// ends the bucket it lands in (as in PyTorch). Buckets come back in the order they will become ready (by the position of
// their first parameter in `order`); parameters inside a bucket keep `order`.
// Requires `order` to be a permutation of a subset of the parameter indices.
BucketPlan plan_buckets(const std::vector<ParamSpec>& params, const std::vector<std::size_t>& order,
                        std::size_t first_cap_bytes, std::size_t cap_bytes);

// The default order: the reverse of registration order, in which backward usually produces
// gradients.
std::vector<std::size_t> reverse_order(std::size_t count);

// The order the buckets are rebuilt from after the first backward: `seen` (the order in which
// rank 0's gradients arrived, as broadcast; entries outside [0, count) and repeats are skipped),
// then the parameters it does not list, in reverse_order.
std::vector<std::size_t> observed_order(const std::vector<std::int64_t>& seen, std::size_t count);

}  // namespace ddp::detail
