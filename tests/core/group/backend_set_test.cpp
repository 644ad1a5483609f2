// Device-keyed backends (group/backend_set.h): the spec's grammar, and a keyed group's routing on
// real processes. No GPU here, so the CUDA side is a test backend that takes buffers labelled
// CUDA (host memory underneath) and runs them on a CPU backend of its own, counting them.
#include "group/backend_set.h"

#include <gtest/gtest.h>

#include <atomic>

#include "backends/registry.h"
#include "cpu/cpu_backend.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/flight_recorder.h"
#include "records/flight_analysis.h"
#include "util/strings.h"
#include "support/expect_error.h"
#include "support/launch.h"
#include "support/multiprocess.h"

namespace ddp::detail {
namespace {

using test::expect_error;
using Type = Device::Type;

TEST(BackendSpec, APlainNameIsOneBackendForEveryDevice) {
  EXPECT_EQ(parse_backend_spec("gloo"), (std::vector<BackendChoice>{{std::nullopt, "gloo"}}));
  EXPECT_EQ(parse_backend_spec(" nccl "), (std::vector<BackendChoice>{{std::nullopt, "nccl"}}));
}

TEST(BackendSpec, DeviceKeyedEntriesInCanonicalOrder) {
  const std::vector<BackendChoice> both{{Type::CPU, "gloo"}, {Type::CUDA, "nccl"}};
  EXPECT_EQ(parse_backend_spec("cpu:gloo,cuda:nccl"), both);
  EXPECT_EQ(parse_backend_spec("cuda:nccl, cpu:gloo"), both);  // every rank's canonical order is the same
  EXPECT_EQ(to_string(both), "cpu:gloo,cuda:nccl");
  EXPECT_EQ(to_string(parse_backend_spec("cuda:nccl")), "cuda:nccl");
  EXPECT_EQ(default_backend_spec(true), "cpu:gloo,cuda:nccl");
  EXPECT_EQ(default_backend_spec(false), "gloo");
}

TEST(BackendSpec, MalformedSpecsSayWhatASpecLooksLike) {
  const std::string help = "per device type (\"cpu:gloo,cuda:nccl\")";
  expect_error<InvalidArgument>([] { parse_backend_spec(""); }, {"the backend is empty", help});
  expect_error<InvalidArgument>([] { parse_backend_spec("cpu:gloo,"); }, {"has an empty entry", help});
  expect_error<InvalidArgument>([] { parse_backend_spec("gpu:nccl"); },
                                {"unknown device type \"gpu\"", "\"cpu\" and \"cuda\""});
  expect_error<InvalidArgument>([] { parse_backend_spec("cpu:gloo,cpu:mpi"); }, {"names device type cpu twice"});
  expect_error<InvalidArgument>([] { parse_backend_spec("gloo,cuda:nccl"); },
                                {"mixes a plain backend with device-keyed"});
  expect_error<InvalidArgument>([] { parse_backend_spec("gloo,nccl"); }, {"several backends without device types"});
  expect_error<InvalidArgument>([] { parse_backend_spec("cpu:"); }, {"no backend named for cpu"});
}

TEST(BackendSpec, AnOpsBackendFollowsItsBuffersDevice) {
  const auto both = parse_backend_spec("cpu:gloo,cuda:nccl");
  float x = 0;
  Op on_gpu{.type = OpType::AllReduce, .input = Buffer{&x, 1, DataType::Float32, Device{Type::CUDA, 0}}};
  on_gpu.output = on_gpu.input;
  EXPECT_EQ(backend_for(both, on_gpu), "nccl");
  EXPECT_EQ(backend_for(both, Op{.type = OpType::AllReduce, .input = buffer_of(&x, 1), .output = buffer_of(&x, 1)}),
            "gloo");
  EXPECT_EQ(backend_for(both, Op{.type = OpType::Barrier}), "gloo");
  EXPECT_EQ(backend_for(parse_backend_spec("nccl"), Op{.type = OpType::Barrier}), "nccl");
}

TEST(BackendSpec, TheAdviceForABufferNoBackendTakes) {
  EXPECT_NE(device_advice("nccl", Device{}).find("init_process_group(\"cpu:gloo,cuda:nccl\")"), std::string::npos);
  EXPECT_NE(device_advice("nccl", Device{Type::CUDA, 3}).find("the one LOCAL_RANK names"), std::string::npos);
  EXPECT_NE(device_advice("gloo", Device{Type::CUDA, 0}).find("\"cpu:gloo,cuda:nccl\""), std::string::npos);
}

// The CUDA side of the keyed groups below: buffers labelled CUDA, run on a CPU backend of its own.
std::atomic<int> g_cuda_ops{0};

class HostAsCuda final : public Backend {
 public:
  explicit HostAsCuda(const BackendContext& context) : inner_(make_cpu_backend(context)) {}
  std::string_view name() const override { return "host_as_cuda"; }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool accepts(const Device& device) const override { return device.is_cuda(); }
  bool supports(DataType dtype, ReduceOp op) const override { return inner_->supports(dtype, op); }
  void all_reduce(Buffer data, ReduceOp op, Deadline deadline) override {
    count();
    inner_->all_reduce(host(data), op, deadline);
  }
  void broadcast(Buffer data, int root, Deadline deadline) override {
    count();
    inner_->broadcast(host(data), root, deadline);
  }
  void all_gather(Buffer input, Buffer output, Deadline deadline) override {
    count();
    inner_->all_gather(host(input), host(output), deadline);
  }
  void barrier(Deadline deadline) override {
    count();
    inner_->barrier(deadline);
  }
  Waiter post_send(Buffer data, int dst, std::uint32_t tag) override {
    count();
    return inner_->post_send(host(data), dst, tag);
  }
  Waiter post_recv(Buffer data, int src, std::uint32_t tag) override {
    count();
    return inner_->post_recv(host(data), src, tag);
  }
  void abort() noexcept override { inner_->abort(); }

 private:
  static void count() { ++g_cuda_ops; }
  static Buffer host(Buffer b) {
    b.device = Device{};
    return b;
  }
  std::unique_ptr<Backend> inner_;
};

void register_host_as_cuda() {
  register_backend(
      "host_as_cuda", [](const BackendContext& c) { return std::make_unique<HostAsCuda>(c); },
      [](const Device& d) { return d.is_cuda(); });
}

Buffer cuda_labelled(std::vector<float>& v) {
  return Buffer{v.data(), v.size(), DataType::Float32, Device{Type::CUDA, 0}};
}

TEST(KeyedGroup, CpuBuffersGoToTheCpuBackendAndCudaBuffersToTheCudaOne) {
  test::run_ranks(3, [](int rank, int world) {
    register_host_as_cuda();
    init_process_group("cpu:gloo,cuda:host_as_cuda");
    auto group = get_default_group();
    EXPECT_EQ(get_backend(), "cpu:gloo,cuda:host_as_cuda");
    EXPECT_TRUE(group->accepts(Device{}));
    EXPECT_TRUE(group->accepts(Device{Type::CUDA, 0}));
    const int before = g_cuda_ops;
    std::vector<float> on_cpu(1000, float(rank + 1)), on_cuda(3000, float(10 * (rank + 1)));
    group->all_reduce(buffer_of(on_cpu.data(), on_cpu.size()))->wait();
    EXPECT_EQ(g_cuda_ops, before) << "a CPU buffer went to the CUDA backend";
    group->all_reduce(cuda_labelled(on_cuda))->wait();
    EXPECT_EQ(g_cuda_ops, before + 1);
    EXPECT_EQ(on_cpu[999], 6.0f);
    EXPECT_EQ(on_cuda[2999], 60.0f);
    // One order of operations for both: the sequence numbers count every op of the group.
    EXPECT_EQ(group->sequence_number(), 2u);
    // A barrier runs on the CPU backend, as PyTorch's gloo barrier does in a keyed group.
    group->barrier()->wait();
    EXPECT_EQ(g_cuda_ops, before + 1);
    // Point to point follows the buffer too.
    std::vector<float> token{float(rank)};
    if (rank == 0) group->send(cuda_labelled(token), 1)->wait();
    if (rank == 1) {
      group->recv(cuda_labelled(token), 0)->wait();
      EXPECT_EQ(token[0], 0.0f);
    }
    EXPECT_EQ(g_cuda_ops, before + 1 + (rank < 2 ? 1 : 0));
    // A subgroup takes the default group's backends.
    auto pair = new_group({0, 1});
    if (pair) {
      EXPECT_EQ(get_backend(pair), "cpu:gloo,cuda:host_as_cuda");
      pair->all_reduce(cuda_labelled(on_cuda))->wait();
      EXPECT_EQ(on_cuda[0], 120.0f);
    }
    (void)world;
    destroy_process_group();
  });
}

// The flight recorder's dump names the group's spec and the backend each op went to, and the
// analysis (ddp-trace, ddprun's summary) says it where the group has several.
TEST(KeyedGroup, TheFlightRecorderNamesBothBackends) {
  test::TempDir dir;
  test::run_ranks(
      2,
      [](int rank, int) {
    register_host_as_cuda();
    init_process_group("cpu:gloo,cuda:host_as_cuda");
    auto group = get_default_group();
    std::vector<float> on_cpu(10, 1.0f), on_cuda(30, 2.0f);
    group->all_reduce(buffer_of(on_cpu.data(), on_cpu.size()))->wait();
    group->all_reduce(cuda_labelled(on_cuda))->wait();
    group->barrier()->wait();
    const FlightDump d = read_dump(dump_flight_recorder("the test asked"));
    ASSERT_EQ(d.groups.size(), 1u);
    EXPECT_EQ(d.groups[0].backend, "cpu:gloo,cuda:host_as_cuda");
    ASSERT_EQ(d.entries.size(), 3u);
    EXPECT_EQ(describe(d.entries[0], d.groups[0]), "all_reduce #0 (float32 x 10, SUM) over gloo");
    EXPECT_EQ(describe(d.entries[1], d.groups[0]), "all_reduce #1 (float32 x 30, SUM) over host_as_cuda");
    EXPECT_EQ(describe(d.entries[2], d.groups[0]), "barrier #2 over gloo");
    group->barrier()->wait();
    if (rank == 1) {  // never calls the next one: the analysis says over which backend rank 0 waited
      dump_flight_recorder("rank 1 leaves");
      destroy_process_group();
      return;
    }
    EXPECT_THROW(group->all_reduce(cuda_labelled(on_cuda))->wait(), Error);  // its failure writes the dump
      },
      {.env = {{"DDP_FLIGHT_RECORDER_DIR", dir.path()}}});
  if (test::is_rank_process()) return;
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 2; ++r) dumps.push_back(read_dump(dir.file(cat("rank_", r, ".flight"))));
  const std::string report = join(analyze(dumps).lines, "\n");
  EXPECT_NE(report.find("group 'world' (2 ranks; cpu:gloo,cuda:host_as_cuda): rank 0 called all_reduce #4 (float32 x "
                        "30, SUM) over host_as_cuda; rank 1 never did"),
            std::string::npos)
      << report;
}

TEST(KeyedGroup, AGroupWithoutACpuBackendRefusesCpuBuffersSayingWhichSpecTakesBoth) {
  test::run_ranks(2, [](int, int) {
    register_host_as_cuda();
    init_process_group("cuda:host_as_cuda");
    std::vector<float> on_cpu(4, 1.0f);
    expect_error<InvalidArgument>([&] { get_default_group()->all_reduce(buffer_of(on_cpu.data(), on_cpu.size())); },
                                  {"all_reduce: the cuda:host_as_cuda backend cannot use buffers on cpu",
                                   "init_process_group(\"cpu:gloo,cuda:nccl\")"});
    destroy_process_group();
  });
}

TEST(KeyedGroup, ACpuEntryThatTakesNoCpuBuffersIsRefusedAtCreation) {
  register_host_as_cuda();
  expect_error<InvalidArgument>([] { ProcessGroup::create("cpu:host_as_cuda", nullptr, 0, 1); },
                                {"host_as_cuda takes no CPU buffers", "\"cpu:gloo,cuda:host_as_cuda\""});
}

TEST(KeyedGroup, AGroupOfOneTakesWhatEachOfItsBackendsTakes) {
  register_host_as_cuda();
  auto group = ProcessGroup::create("cpu:gloo,cuda:host_as_cuda", nullptr, 0, 1);
  EXPECT_EQ(group->backend_name(), "cpu:gloo,cuda:host_as_cuda");
  EXPECT_TRUE(group->accepts(Device{}));
  EXPECT_TRUE(group->accepts(Device{Type::CUDA, 0}));
  std::vector<float> in{1, 2}, out(2);
  group->all_gather(buffer_of(in.data(), 2), buffer_of(out.data(), 2))->wait();
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace ddp::detail
