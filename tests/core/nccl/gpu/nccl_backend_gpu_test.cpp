// The nccl backend itself, on one GPU: a real NCCL communicator of one rank (a group of one in a
// ProcessGroup needs no backend, so these call the backend directly), the stream ordering of
// `ready` events, staging of host buffers, the watchdog's timeouts and aborts.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "ddp/error.h"
#include "ddp/hash_store.h"
#include "gpu_support.h"
#include "group/execute.h"
#include "op/op.h"
#include "nccl/nccl_backend.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool has(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

std::unique_ptr<Backend> one_rank_backend(std::chrono::milliseconds timeout = 60s, int size = 1) {
  ::unsetenv("LOCAL_RANK");  // the current device: 0
  test::cuda_check(cudaSetDevice(0), "cudaSetDevice");
  return detail::make_nccl_backend(BackendContext{std::make_shared<HashStore>(), 0, size, timeout, ""});
}

Backend::Deadline soon(std::chrono::milliseconds d = 60s) { return Clock::now() + d; }

// A float array on the GPU, filled from and read into host vectors.
struct DeviceFloats {
  explicit DeviceFloats(std::size_t n) : count(n) {
    test::cuda_check(cudaMalloc(&data, n * sizeof(float)), "cudaMalloc");
  }
  ~DeviceFloats() { cudaFree(data); }
  void set(const std::vector<float>& values) {
    test::cuda_check(cudaMemcpy(data, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<float> get() const {
    std::vector<float> values(count);
    test::cuda_check(cudaMemcpy(values.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost), "download");
    return values;
  }
  Buffer buffer() const { return Buffer{data, count, DataType::Float32, Device{Device::Type::CUDA, 0}}; }
  void* data = nullptr;
  std::size_t count;
};

TEST(NcclBackend, EveryCollectiveRunsOnARealOneRankCommunicator) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  EXPECT_EQ(backend->name(), "nccl");
  DeviceFloats a(8), b(8);
  const std::vector<float> values = {1, -2, 3, -4, 5, -6, 7, -8};
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX}) {
    a.set(values);
    backend->all_reduce(a.buffer(), op, soon());
    EXPECT_EQ(a.get(), values) << to_string(op);  // the reduction of one rank's values is themselves
    a.set(values);
    backend->reduce(a.buffer(), op, 0, soon());
    EXPECT_EQ(a.get(), values) << to_string(op);
    a.set(values);
    b.set(std::vector<float>(8, 0));
    backend->reduce_scatter(a.buffer(), b.buffer(), op, soon());
    EXPECT_EQ(b.get(), values) << to_string(op);
  }
  a.set(values);
  backend->broadcast(a.buffer(), 0, soon());
  EXPECT_EQ(a.get(), values);
  for (auto run : {+[](Backend&be, Buffer in, Buffer out) { be.all_gather(in, out, soon()); },
                   +[](Backend&be, Buffer in, Buffer out) { be.gather(in, out, 0, soon()); },
                   +[](Backend&be, Buffer in, Buffer out) { be.scatter(in, out, 0, soon()); },
                   +[](Backend&be, Buffer in, Buffer out) { be.all_to_all(in, out, soon()); }}) {
    a.set(values);
    b.set(std::vector<float>(8, 0));
    run(*backend, a.buffer(), b.buffer());
    EXPECT_EQ(b.get(), values);
  }
  backend->barrier(soon());
}

TEST(NcclBackend, SixteenBitFloatsAndIntegersReduceNatively) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  for (DataType t : {DataType::Float16, DataType::BFloat16, DataType::Int8, DataType::UInt8, DataType::Int32,
                     DataType::Int64, DataType::Float64}) {
    EXPECT_TRUE(backend->supports(t, ReduceOp::AVG)) << to_string(t);
    const std::size_t bytes = 16 * element_size(t);
    std::vector<unsigned char> host(bytes), back(bytes);
    for (std::size_t i = 0; i < 16; ++i) {  // finite values of every type: 1.0 + a little, small integers
      unsigned char* p = host.data() + i * element_size(t);
      if (t == DataType::Float16 || t == DataType::BFloat16) {
        const std::uint16_t bits = static_cast<std::uint16_t>((t == DataType::Float16 ? 0x3C00 : 0x3F80) + i * 3);
        std::memcpy(p, &bits, 2);
      } else if (t == DataType::Float64) {
        const double v = 1.5 * static_cast<double>(i) - 4;
        std::memcpy(p, &v, 8);
      } else {
        for (std::size_t k = 0; k < element_size(t); ++k) p[k] = k == 0 ? static_cast<unsigned char>(i * 7 + 1) : 0;
      }
    }
    void* data = nullptr;
    test::cuda_check(cudaMalloc(&data, bytes), "cudaMalloc");
    test::cuda_check(cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice), "upload");
    backend->all_reduce(Buffer{data, 16, t, Device{Device::Type::CUDA, 0}}, ReduceOp::MAX, soon());
    test::cuda_check(cudaMemcpy(back.data(), data, bytes, cudaMemcpyDeviceToHost), "download");
    cudaFree(data);
    EXPECT_EQ(back, host) << to_string(t);
  }
}

// The op must wait for the producer: the producer's stream is held up on the host for 300 ms
// before it writes the input, and the op is issued at once.
TEST(NcclBackend, AnOpWaitsForItsReadyEventOnTheProducersStream) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  DeviceFloats in(4), out(4);
  in.set({0, 0, 0, 0});
  out.set({0, 0, 0, 0});
  cudaStream_t producer;
  test::cuda_check(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), "cudaStreamCreate");
  float* pinned = nullptr;
  test::cuda_check(cudaMallocHost(&pinned, 4 * sizeof(float)), "cudaMallocHost");
  for (int i = 0; i < 4; ++i) pinned[i] = static_cast<float>(i + 1);
  test::cuda_check(cudaLaunchHostFunc(
                       producer, [](void*) { std::this_thread::sleep_for(300ms); }, nullptr),
                   "cudaLaunchHostFunc");
  test::cuda_check(cudaMemcpyAsync(in.data, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, producer), "copy");
  cudaEvent_t ready;
  test::cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  test::cuda_check(cudaEventRecord(ready, producer), "cudaEventRecord");
  Buffer input = in.buffer(), output = out.buffer();
  input.ready = output.ready = ready;
  backend->all_gather(input, output, soon());
  EXPECT_EQ(out.get(), (std::vector<float>{1, 2, 3, 4}));
  cudaStreamSynchronize(producer);
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaFreeHost(pinned);
}

TEST(NcclBackend, WithoutAReadyEventAnOpWaitsForTheLegacyDefaultStream) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  DeviceFloats in(4), out(4);
  in.set({0, 0, 0, 0});
  float* pinned = nullptr;
  test::cuda_check(cudaMallocHost(&pinned, 4 * sizeof(float)), "cudaMallocHost");
  for (int i = 0; i < 4; ++i) pinned[i] = static_cast<float>(10 * (i + 1));
  test::cuda_check(cudaLaunchHostFunc(
                       cudaStreamLegacy, [](void*) { std::this_thread::sleep_for(300ms); }, nullptr),
                   "cudaLaunchHostFunc");
  test::cuda_check(cudaMemcpyAsync(in.data, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, cudaStreamLegacy),
                   "copy");
  backend->all_gather(in.buffer(), out.buffer(), soon());
  EXPECT_EQ(out.get(), (std::vector<float>{10, 20, 30, 40}));
  cudaDeviceSynchronize();
  cudaFreeHost(pinned);
}

TEST(NcclBackend, HostBuffersAreStagedThroughTheDevice) {  // what DDP_DEBUG's agreement check passes
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  std::vector<std::uint8_t> in = {1, 2, 3}, out(3);
  backend->all_gather(buffer_of(in.data(), 3), buffer_of(out.data(), 3), soon());
  EXPECT_EQ(out, in);
}

TEST(NcclBackend, TakesBuffersOnItsOwnGpuOnly) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  EXPECT_TRUE(backend->accepts(Device{Device::Type::CUDA, 0}));
  EXPECT_FALSE(backend->accepts(Device{}));
  EXPECT_FALSE(backend->accepts(Device{Device::Type::CUDA, 1}));
}

TEST(NcclBackend, BitwiseReductionsFailWithAClearErrorAndLeaveTheBackendUsable) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  DeviceFloats a(2);
  Buffer ints{a.data, 2, DataType::Int32, Device{Device::Type::CUDA, 0}};
  for (ReduceOp op : {ReduceOp::BAND, ReduceOp::BOR, ReduceOp::BXOR}) {
    EXPECT_FALSE(backend->supports(DataType::Int32, op));
    detail::Op all_reduce{.type = detail::OpType::AllReduce, .input = ints, .output = ints, .reduce_op = op};
    try {
      detail::execute(*backend, all_reduce, soon());
      ADD_FAILURE() << "no error for " << to_string(op);
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(
          has(e.what(), "the nccl backend cannot reduce int32 with " + std::string(to_string(op)) + " on cuda:0"))
          << e.what();
    }
  }
  backend->all_reduce(ints, ReduceOp::SUM, soon());  // still fine
}

TEST(NcclBackend, ACommunicatorWhosePeerNeverArrivesTimesOut) {
  DDP_REQUIRE_GPUS(1);
  const auto start = Clock::now();
  try {
    one_rank_backend(2s, /*size=*/2);  // rank 1 never comes
    ADD_FAILURE() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(has(e.what(), "was not set up within the timeout")) << e.what();
    EXPECT_TRUE(has(e.what(), "rank 0 of 2 on cuda:0")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 20s);
}

TEST(NcclBackend, ASendThatNobodyReceivesTimesOutNamingIt) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend(2s);
  DeviceFloats a(4);
  const auto start = Clock::now();
  // The channel "to rank 0" of a one-rank group has nobody on its other end.
  auto waiter = backend->post_send(a.buffer(), 0, 0);
  try {
    waiter(Clock::now() + 2s);
    ADD_FAILURE() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(has(e.what(), "nccl send to rank 0")) << e.what();
    EXPECT_TRUE(has(e.what(), "matching recv")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 20s);
  backend.reset();  // joins the channel's thread, which gives up at its own deadline
  EXPECT_LT(Clock::now() - start, 30s);
}

TEST(NcclBackend, AfterAnAbortEveryOpFailsAtOnceSayingWhy) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  DeviceFloats a(4);
  backend->all_reduce(a.buffer(), ReduceOp::SUM, soon());
  backend->abort();
  backend->abort();  // idempotent
  const auto start = Clock::now();
  try {
    backend->all_reduce(a.buffer(), ReduceOp::SUM, soon());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "nccl all_reduce")) << e.what();
    EXPECT_TRUE(has(e.what(), "was aborted after an earlier failure")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(NcclBackend, ManyOpsBackToBack) {
  DDP_REQUIRE_GPUS(1);
  auto backend = one_rank_backend();
  DeviceFloats a(1 << 20);
  const auto start = Clock::now();
  for (int i = 0; i < 500; ++i) backend->all_reduce(a.buffer(), ReduceOp::SUM, soon());
  const auto per_op = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 500;
  std::printf("[ info ] 4 MB one-rank all_reduce, issue to completion: %.1f us per op\n", per_op);
}

}  // namespace
}  // namespace ddp
