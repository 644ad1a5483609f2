#include "reducer/arrivals.h"

#include <algorithm>

namespace ddp::detail {

Arrivals::Arrivals(std::size_t num_params, bool static_graph)
    : learning_(static_graph), expected_(num_params, 1), arrived_(num_params, 0) {}

void Arrivals::reset() {
  std::fill(arrived_.begin(), arrived_.end(), 0);
  order_.clear();
}

Arrivals::Verdict Arrivals::arrive(std::size_t param) {
  const int n = ++arrived_[param];
  if (n == 1) order_.push_back(param);
  if (learning_) return Verdict::Counted;
  if (n > expected_[param]) return Verdict::TooMany;
  return n == expected_[param] ? Verdict::Ready : Verdict::Waiting;
}

void Arrivals::learn(std::vector<int> counts) {
  expected_ = std::move(counts);
  learning_ = false;
}

std::vector<std::size_t> Arrivals::never_expected() const {
  std::vector<std::size_t> params;
  if (learning_) return params;
  for (std::size_t p = 0; p < expected_.size(); ++p) {
    if (expected_[p] == 0) params.push_back(p);
  }
  return params;
}

std::vector<std::size_t> Arrivals::short_of_expected() const {
  std::vector<std::size_t> params;
  if (learning_) return params;
  for (std::size_t p = 0; p < expected_.size(); ++p) {
    if (arrived_[p] < expected_[p]) params.push_back(p);
  }
  return params;
}

}  // namespace ddp::detail
