#include "reducer/unused_parameters.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_set>

namespace ddp::detail {

std::vector<std::size_t> unreached_parameters(const std::vector<at::Tensor>& outputs,
                                              const std::vector<compat::GradAccumulator>& accumulators) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& out : outputs) {
    if (!out.defined()) continue;
    if (auto fn = out.grad_fn()) {
      if (seen.insert(fn.get()).second) stack.push_back(fn.get());
    } else if (out.requires_grad()) {
      auto acc = torch::autograd::impl::try_get_grad_accumulator(out);
      if (acc) seen.insert(acc.get());
    }
  }
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      if (edge.function && seen.insert(edge.function.get()).second) stack.push_back(edge.function.get());
    }
  }
  std::vector<std::size_t> unreached;
  for (std::size_t i = 0; i < accumulators.size(); ++i) {
    if (!seen.count(accumulators[i].get())) unreached.push_back(i);
  }
  return unreached;
}

}  // namespace ddp::detail
