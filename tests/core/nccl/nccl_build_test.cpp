// The nccl backend on any machine, GPU or not: what the stub says, what nccl supports, how the
// default backend is chosen, and how asking for nccl without a GPU fails. (The tests that need
// a GPU are in gpu/, a binary of their own with the CTest label "gpu".)
#include <gtest/gtest.h>

#include <cstdlib>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "nccl/device_copy.h"
#include "nccl/nccl_backend.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

bool has(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

TEST(NcclBuild, TheStubSaysWhatToInstallAndWhatElseToUse) {
  const std::string message = detail::nccl_missing_message();
  for (const char* fragment : {"not in this build", "CUDA toolkit", "NCCL", "/usr/local/cuda", "-DDDP_WITH_NCCL=ON",
                               "rebuild", "gloo backend for CPU tensors"}) {
    EXPECT_TRUE(has(message, fragment)) << "missing '" << fragment << "' in: " << message;
  }
}

TEST(NcclBuild, SupportsEveryReductionButTheBitwiseOnes) {
  for (DataType t : {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16, DataType::Int8,
                     DataType::UInt8, DataType::Int32, DataType::Int64}) {
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX}) {
      EXPECT_TRUE(detail::nccl_supports(t, op)) << to_string(t) << " " << to_string(op);
    }
    for (ReduceOp op : {ReduceOp::BAND, ReduceOp::BOR, ReduceOp::BXOR}) {
      EXPECT_FALSE(detail::nccl_supports(t, op)) << to_string(t) << " " << to_string(op);
    }
  }
}

TEST(NcclBuild, CudaAvailableIsAnAnswerNeverAnError) {
  bool first = false, second = true;
  EXPECT_NO_THROW(first = detail::cuda_available());
  EXPECT_NO_THROW(second = detail::cuda_available());
  EXPECT_EQ(first, second);
#ifndef DDP_WITH_NCCL
  EXPECT_FALSE(first) << "a build without NCCL has no CUDA";
#endif
}

TEST(NcclBuild, NoBackendNamedMeansGlooWithoutCuda) {
  if (detail::cuda_available()) GTEST_SKIP() << "this machine has a CUDA device; the gpu tests cover nccl";
  test::run_ranks(2, [](int, int) {
    init_process_group("", {.timeout = 60s});
    EXPECT_EQ(get_backend(), "gloo");
    std::int64_t x = get_rank() + 1;
    get_default_group()->all_reduce(buffer_of(&x, 1))->wait();
    EXPECT_EQ(x, 3);
    destroy_process_group();
  });
}

TEST(NcclBuild, AGroupOfOneWithNoBackendNamedWorksToo) {
  init_process_group("", {.world_size = 1, .rank = 0});
  EXPECT_EQ(get_backend(), detail::cuda_available() ? "nccl" : "gloo");
  double x = 2.5;
  get_default_group()->all_reduce(buffer_of(&x, 1))->wait();
  EXPECT_EQ(x, 2.5);
  destroy_process_group();
}

TEST(NcclBuild, AskingForNcclWithoutAGpuSaysWhyAndWhatToUse) {
  if (detail::cuda_available()) GTEST_SKIP() << "this machine has a CUDA device; the gpu tests cover nccl";
  test::run_ranks(2, [](int, int) {
    try {
      init_process_group("nccl", {.timeout = 30s});
      ADD_FAILURE() << "init_process_group(\"nccl\") succeeded without a GPU";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_TRUE(has(message, "init_process_group")) << message;
      EXPECT_TRUE(has(message, "gloo")) << message;
#ifdef DDP_WITH_NCCL
      EXPECT_TRUE(has(message, "the nccl backend needs a CUDA device")) << message;
#else
      EXPECT_TRUE(has(message, detail::nccl_missing_message())) << message;
      EXPECT_NE(dynamic_cast<const InvalidArgument*>(&e), nullptr) << message;
#endif
    }
    EXPECT_FALSE(is_initialized());
  });
}

TEST(NcclBuild, CopiesBetweenHostBuffersAreMemmovesAndCudaOnesFailCleanlyWithoutAGpu) {
  std::int32_t a[4] = {1, 2, 3, 4}, b[4] = {};
  detail::copy_buffer(buffer_of(a, 4), buffer_of(b, 4));
  EXPECT_EQ(b[3], 4);
  detail::copy_buffer(buffer_of(a, 3), buffer_of(a + 1, 3));  // overlapping
  EXPECT_EQ(a[1], 1);
  EXPECT_EQ(a[3], 3);
  if (detail::cuda_available()) return;
  Buffer device{b, 4, DataType::Int32, Device{Device::Type::CUDA, 0}};
  EXPECT_THROW(detail::copy_buffer(buffer_of(a, 4), device), Error);
}

TEST(NcclBuild, CudaBuffersOnGlooAreRefusedBeforeAnythingStarts) {
  test::run_ranks(2, [](int, int) {
    init_process_group("gloo", {.timeout = 30s});
    float x[2] = {};
    Buffer device{x, 2, DataType::Float32, Device{Device::Type::CUDA, 0}};
    try {
      get_default_group()->all_reduce(device);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(has(e.what(), "gloo backend cannot use buffers on cuda:0")) << e.what();
      EXPECT_TRUE(has(e.what(), "nccl backend takes CUDA buffers")) << e.what();
      EXPECT_TRUE(has(e.what(), "init_process_group(\"cpu:gloo,cuda:nccl\")")) << e.what();
    }
    barrier();  // the group is still usable
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp
