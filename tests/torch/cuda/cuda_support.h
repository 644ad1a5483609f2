// What the LibTorch GPU tests share. They are built only when LibTorch has CUDA, and every test
// skips (saying why) on a machine without a GPU.
#pragma once

#include <gtest/gtest.h>
#include <torch/cuda.h>

#define DDP_REQUIRE_CUDA_DEVICES(n)                                                                          \
  do {                                                                                                       \
    const auto ddp_have_ = static_cast<int>(torch::cuda::device_count());                                    \
    if (ddp_have_ == 0) GTEST_SKIP() << "no CUDA device: torch::cuda::device_count() is 0";                  \
    if (ddp_have_ < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, this machine has " << ddp_have_; \
  } while (0)
