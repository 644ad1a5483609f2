// ddp::amp::Autocast: the region autocasts, nests, restores the previous state (also when an
// exception leaves it) and clears the cast cache only when the outermost region ends.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "compat/torch_compat.h"
#include "ddp/error.h"
#include "ddp/torch/amp.h"
#include "support/expect_error.h"

namespace ddp::test {
namespace {

using ddp::amp::Autocast;

// How deep the autocast regions are nested right now (LibTorch reports it only on a change).
int nesting() {
  const int depth = at::autocast::increment_nesting() - 1;
  at::autocast::decrement_nesting();
  return depth;
}

at::ScalarType mm_dtype() { return torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(); }

TEST(Autocast, CpuRegionRunsMatmulsInBfloat16AndRestoresTheStateAfterwards) {
  ASSERT_FALSE(compat::autocast_enabled(at::kCPU));
  EXPECT_EQ(mm_dtype(), at::kFloat);
  {
    Autocast autocast(torch::kCPU);
    EXPECT_TRUE(autocast.enabled());
    EXPECT_EQ(autocast.dtype(), at::kBFloat16);
    EXPECT_TRUE(compat::autocast_enabled(at::kCPU));
    EXPECT_EQ(nesting(), 1);
    EXPECT_EQ(mm_dtype(), at::kBFloat16);
    // A model's forward: Linear runs in bfloat16; its float32 weights get float32 gradients.
    torch::nn::Linear linear(4, 3);
    auto out = linear(torch::randn({5, 4}));
    EXPECT_EQ(out.scalar_type(), at::kBFloat16);
    out.to(at::kFloat).sum().backward();
    EXPECT_EQ(linear->weight.grad().scalar_type(), at::kFloat);
  }
  EXPECT_FALSE(compat::autocast_enabled(at::kCPU));
  EXPECT_EQ(nesting(), 0);
  EXPECT_EQ(mm_dtype(), at::kFloat);
}

TEST(Autocast, DisabledRegionInsideAnEnabledOneAndBack) {
  Autocast outer(torch::kCPU, {.dtype = at::kBFloat16});
  {
    Autocast inner(torch::kCPU, {.enabled = false});
    EXPECT_FALSE(inner.enabled());
    EXPECT_EQ(nesting(), 2);
    EXPECT_EQ(mm_dtype(), at::kFloat);
  }
  EXPECT_EQ(nesting(), 1);
  EXPECT_EQ(mm_dtype(), at::kBFloat16);
}

TEST(Autocast, AnExceptionLeavingTheRegionRestoresThePreviousState) {
  const bool cache_before = at::autocast::is_autocast_cache_enabled();
  const auto dtype_before = compat::autocast_dtype(at::kCPU);
  try {
    Autocast outer(torch::kCPU);
    try {
      Autocast inner(torch::kCPU, {.enabled = false, .cache_enabled = !cache_before});
      EXPECT_EQ(at::autocast::is_autocast_cache_enabled(), !cache_before);
      throw std::runtime_error("inner");
    } catch (const std::runtime_error&) {
      // Back in the outer region, as it was.
      EXPECT_TRUE(compat::autocast_enabled(at::kCPU));
      EXPECT_EQ(at::autocast::is_autocast_cache_enabled(), cache_before);
      EXPECT_EQ(nesting(), 1);
    }
    throw std::runtime_error("outer");
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "outer");
  }
  EXPECT_FALSE(compat::autocast_enabled(at::kCPU));
  EXPECT_EQ(compat::autocast_dtype(at::kCPU), dtype_before);
  EXPECT_EQ(at::autocast::is_autocast_cache_enabled(), cache_before);
  EXPECT_EQ(nesting(), 0);
}

TEST(Autocast, TheCastCacheLastsUntilTheOutermostRegionEnds) {
  auto weight = torch::randn({3, 3}, torch::requires_grad());  // a leaf: its casts are cached
  at::Tensor first;
  {
    Autocast outer(torch::kCPU);
    first = at::autocast::cached_cast(at::kBFloat16, weight, c10::DeviceType::CPU);
    EXPECT_TRUE(at::autocast::cached_cast(at::kBFloat16, weight, c10::DeviceType::CPU).is_same(first));
    { Autocast inner(torch::kCPU); }  // an inner region's end keeps the cache
    EXPECT_TRUE(at::autocast::cached_cast(at::kBFloat16, weight, c10::DeviceType::CPU).is_same(first));
  }
  Autocast again(torch::kCPU);  // `first` is still alive, so a new cast cannot reuse its address
  EXPECT_FALSE(at::autocast::cached_cast(at::kBFloat16, weight, c10::DeviceType::CPU).is_same(first));
}

TEST(Autocast, UnsupportedChoicesAreRefusedOrDisabled) {
  if (!torch::cuda::is_available()) {  // PyTorch warns and disables: CUDA code runs on a CPU machine
    Autocast cuda(torch::kCUDA);
    EXPECT_FALSE(cuda.enabled());
    EXPECT_FALSE(compat::autocast_enabled(at::kCUDA));
  }
  // CPU autocast has bfloat16 only in LibTorch 1.13 (PyTorch 1.13 fails in set_autocast_cpu_dtype),
  // float16 too in 2.x; never float64.
  expect_error<InvalidArgument>([] { Autocast double_on_cpu(torch::kCPU, {.dtype = at::kDouble}); },
                                {"CPU autocast supports only bfloat16", "not Double", "torch::kBFloat16"});
  if (compat::cpu_autocast_supports(at::kHalf)) {
    Autocast half_on_cpu(torch::kCPU, {.dtype = at::kHalf});
    EXPECT_EQ(torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(), at::kHalf);
  } else {
    expect_error<InvalidArgument>([] { Autocast half_on_cpu(torch::kCPU, {.dtype = at::kHalf}); },
                                  {"CPU autocast supports only bfloat16", "not Half"});
  }
  expect_error<InvalidArgument>(
      [] { Autocast meta(c10::DeviceType::Meta); },
      {"ddp::amp::Autocast", "device type", "is not supported", "torch::kCUDA or torch::kCPU"});
  // Nothing was left changed by the refused guards.
  EXPECT_FALSE(compat::autocast_enabled(at::kCPU));
  EXPECT_EQ(compat::autocast_dtype(at::kCPU), at::kBFloat16);
  EXPECT_EQ(nesting(), 0);
}

}  // namespace
}  // namespace ddp::test
