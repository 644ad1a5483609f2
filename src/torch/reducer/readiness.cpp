#include "reducer/readiness.h"

#include <cstdint>

namespace ddp::detail {

Readiness::Readiness(const BucketPlan& plan, std::size_t num_params)
    : plan_(plan), bucket_of_(num_params, SIZE_MAX), pending_(plan.size()), ready_(num_params) {
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    for (std::size_t p : plan_[b]) bucket_of_[p] = b;
  }
  reset();
}

void Readiness::reset() {
  for (std::size_t b = 0; b < plan_.size(); ++b) pending_[b] = plan_[b].size();
  std::fill(ready_.begin(), ready_.end(), false);
  order_.clear();
  next_launch_ = 0;
}

std::vector<std::size_t> Readiness::mark_ready(std::size_t param) {
  std::vector<std::size_t> launch;
  if (ready_[param] || bucket_of_[param] == SIZE_MAX) return launch;
  ready_[param] = true;
  order_.push_back(param);
  --pending_[bucket_of_[param]];
  while (next_launch_ < pending_.size() && pending_[next_launch_] == 0) launch.push_back(next_launch_++);
  return launch;
}

std::vector<std::size_t> Readiness::unready() const {
  std::vector<std::size_t> missing;
  for (const auto& bucket : plan_) {
    for (std::size_t p : bucket) {
      if (!ready_[p]) missing.push_back(p);
    }
  }
  return missing;
}

}  // namespace ddp::detail
