#include "reducer/bucket_plan.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace ddp::detail {

BucketPlan plan_buckets(const std::vector<ParamSpec>& params, const std::vector<std::size_t>& order,
                        std::size_t first_cap_bytes, std::size_t cap_bytes) {
  struct Open {
    std::vector<std::size_t> members;
    std::size_t bytes = 0;
    bool first = true;  // still filling the group's first bucket
  };
  std::map<int, Open> open;
  BucketPlan plan;
  for (std::size_t index : order) {
    Open& bucket = open[params[index].group];
    bucket.members.push_back(index);
    bucket.bytes += params[index].bytes;
    if (bucket.bytes >= (bucket.first ? first_cap_bytes : cap_bytes)) {
      plan.push_back(std::move(bucket.members));
      bucket = Open{{}, 0, false};
    }
  }
  for (auto& [group, bucket] : open) {
    if (!bucket.members.empty()) plan.push_back(std::move(bucket.members));
  }
  // Ready order: by where each bucket's first parameter stands in `order`.
  std::vector<std::size_t> position(params.size(), 0);
  for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::stable_sort(plan.begin(), plan.end(),
                   [&](const auto& a, const auto& b) { return position[a.front()] < position[b.front()]; });
  return plan;
}

std::vector<std::size_t> reverse_order(std::size_t count) {
  std::vector<std::size_t> order(count);
  std::iota(order.rbegin(), order.rend(), 0);
  return order;
}

std::vector<std::size_t> observed_order(const std::vector<std::int64_t>& seen, std::size_t count) {
  std::vector<std::size_t> order;
  std::vector<bool> listed(count);
  for (std::int64_t p : seen) {
    if (p >= 0 && static_cast<std::size_t>(p) < count && !listed[p]) {
      order.push_back(static_cast<std::size_t>(p));
      listed[p] = true;
    }
  }
  for (std::size_t p : reverse_order(count)) {
    if (!listed[p]) order.push_back(p);
  }
  return order;
}

}  // namespace ddp::detail
