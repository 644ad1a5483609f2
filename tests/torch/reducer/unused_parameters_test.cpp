// find_unused_parameters' graph walk, on real autograd graphs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "reducer/unused_parameters.h"

namespace ddp::detail {
namespace {

std::vector<compat::GradAccumulator> accumulators(const std::vector<at::Tensor>& params) {
  std::vector<compat::GradAccumulator> out;
  for (const auto& p : params) out.push_back(torch::autograd::impl::grad_accumulator(p));
  return out;
}

TEST(UnusedParameters, TheParametersTheOutputsDoNotReachAreFound) {
  torch::nn::Linear a(4, 3), b(3, 2), unused(3, 2);
  std::vector<at::Tensor> params{a->weight, a->bias, b->weight, b->bias, unused->weight, unused->bias};
  const auto acc = accumulators(params);
  auto out = b(torch::relu(a(torch::ones({1, 4}))));
  EXPECT_EQ(unreached_parameters({out}, acc), (std::vector<std::size_t>{4, 5}));
  // Several outputs, one undefined: the union of what the defined ones reach.
  auto other = unused(torch::ones({1, 3}));
  EXPECT_EQ(unreached_parameters({at::Tensor(), other}, acc), (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(unreached_parameters({out, other}, acc).empty());
  // A parameter returned as it is reaches its own accumulator.
  EXPECT_EQ(unreached_parameters({a->weight}, acc), (std::vector<std::size_t>{1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace ddp::detail
