// The recorder on its own (a ring of the last N operations, written atomically to a file) and
// its settings from the environment.
#include "flight/recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "ddp/error.h"
#include "records/flight_config.h"
#include "support/expect_error.h"
#include "support/launch.h"

namespace ddp::detail {
namespace {

using test::expect_error;

Op all_reduce(std::uint64_t seq, std::size_t count) {
  Op op;
  op.type = OpType::AllReduce;
  op.seq = seq;
  op.input = op.output = Buffer{nullptr, count, DataType::Float32};
  op.reduce_op = ReduceOp::MAX;
  return op;
}

TEST(FlightRecorder, KeepsTheLastNOperationsWithTheirStates) {
  FlightRecorder recorder(3, "/nonexistent");
  EXPECT_EQ(recorder.path(), "");
  EXPECT_EQ(recorder.add_group("world", 1, {0, 1}), 0u);
  EXPECT_EQ(recorder.add_group("pairs", 0, {1, 3}), 1u);
  EXPECT_EQ(recorder.path(), "/nonexistent/rank_1.flight");
  std::vector<FlightRecorder::Ticket> tickets;
  for (std::uint64_t s = 0; s < 5; ++s) tickets.push_back(recorder.issued(0, all_reduce(s, 10 + s), nullptr));
  recorder.started(tickets[0]);  // overwritten: harmless
  recorder.ended(tickets[0], true);
  recorder.started(tickets[3]);
  recorder.ended(tickets[3], true);
  recorder.started(tickets[4]);
  Op send;
  send.type = OpType::Send;
  send.seq = 0;
  send.peer = 3;
  send.tag = 9;
  send.input = send.output = Buffer{nullptr, 4, DataType::Int32};
  const auto sent = recorder.issued(1, send, nullptr);
  recorder.started(sent);
  recorder.ended(sent, false);

  const FlightDump d = recorder.snapshot("why");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.pid, ::getpid());
  EXPECT_EQ(d.reason, "why");
  EXPECT_EQ(d.capacity, 3u);
  EXPECT_EQ(d.recorded, 6u);
  ASSERT_EQ(d.groups.size(), 2u);
  EXPECT_EQ(d.groups[1], (FlightGroup{"pairs", 0, 2, {1, 3}}));
  ASSERT_EQ(d.entries.size(), 3u);
  EXPECT_EQ(d.entries[0].seq, 3u);
  EXPECT_EQ(d.entries[0].state, FlightState::Finished);
  EXPECT_EQ(d.entries[0].count, 13u);
  EXPECT_EQ(d.entries[0].reduce, ReduceOp::MAX);
  EXPECT_EQ(d.entries[1].state, FlightState::Started);
  EXPECT_EQ(d.entries[1].ended_ns, 0);
  EXPECT_LE(d.entries[0].issued_ns, d.entries[0].started_ns);
  EXPECT_LE(d.entries[0].started_ns, d.entries[0].ended_ns);
  EXPECT_EQ(describe(to_op(d.entries[2])), "send #0 (int32 x 4, to rank 3, tag 9)");
  EXPECT_EQ(d.entries[2].group, 1u);
  EXPECT_EQ(d.entries[2].state, FlightState::Failed);
  EXPECT_EQ(parse_dump(encode(d), "x"), d);
}

// A device-keyed group (PyTorch 2.x's "cpu:gloo,cuda:nccl"): each entry names the backend its
// buffers' device went to, a barrier the CPU's; a plain group names its one backend.
TEST(FlightRecorder, NamesEachEntrysBackendInAKeyedGroup) {
  FlightRecorder recorder(8, "/nonexistent");
  recorder.add_group("world", 0, {0, 1}, parse_backend_spec("cuda:nccl, cpu:gloo"));
  recorder.add_group("side", 0, {0, 1}, parse_backend_spec("gloo"));
  Op on_gpu = all_reduce(0, 4);
  on_gpu.input.device = on_gpu.output.device = Device{Device::Type::CUDA, 0};
  recorder.issued(0, on_gpu, nullptr);
  recorder.issued(0, all_reduce(1, 4), nullptr);
  Op barrier;
  barrier.seq = 2;
  recorder.issued(0, barrier, nullptr);
  recorder.issued(1, all_reduce(0, 4), nullptr);
  const FlightDump d = recorder.snapshot("");
  ASSERT_EQ(d.groups.size(), 2u);
  EXPECT_EQ(d.groups[0].backend, "cpu:gloo,cuda:nccl") << "canonical: get_backend()'s form";
  EXPECT_EQ(d.groups[1].backend, "gloo");
  ASSERT_EQ(d.entries.size(), 4u);
  EXPECT_EQ(d.entries[0].backend, "nccl");
  EXPECT_EQ(d.entries[1].backend, "gloo");
  EXPECT_EQ(d.entries[2].backend, "gloo");
  EXPECT_EQ(d.entries[3].backend, "gloo");
  EXPECT_EQ(describe(d.entries[0], d.groups[0]), "all_reduce #0 (float32 x 4, MAX) over nccl");
  EXPECT_EQ(describe(d.entries[3], d.groups[1]), "all_reduce #0 (float32 x 4, MAX)") << "one backend: nothing to tell";
  EXPECT_EQ(parse_dump(encode(d), "x"), d);
}

TEST(FlightRecorder, OffItRecordsNothing) {
  FlightRecorder recorder(0, "/nonexistent");
  EXPECT_FALSE(recorder.enabled());
  recorder.add_group("world", 0, {0});
  const auto t = recorder.issued(0, all_reduce(0, 1), nullptr);
  EXPECT_EQ(t.id, 0u);
  recorder.started(t);
  recorder.ended(t, true);
  EXPECT_TRUE(recorder.snapshot("").entries.empty());
  EXPECT_FALSE(recorder.dump("nothing"));
}

[[gnu::noinline]] FlightRecorder::Ticket issue_here(FlightRecorder& r) {
  auto t = r.issued(0, all_reduce(0, 1), __builtin_return_address(0));
  asm volatile("");  // keeps the call from being a tail call
  return t;
}

TEST(FlightRecorder, NamesTheCaller) {
  FlightRecorder recorder(4, "/nonexistent");
  recorder.add_group("world", 0, {0});
  issue_here(recorder);
  // An exported symbol is named; a static executable's own code by module and offset.
  recorder.issued(0, all_reduce(1, 1), reinterpret_cast<const char*>(&::getpid) + 1);
  const FlightDump d = recorder.snapshot("");
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_NE(d.entries[0].frame.find("ddp_core_tests+0x"), std::string::npos) << d.entries[0].frame;
  EXPECT_NE(d.entries[1].frame.find("getpid+0x0"), std::string::npos) << d.entries[1].frame;
}

TEST(FlightRecorder, WritesTheDumpWholeIntoANewFolder) {
  test::TempDir dir;
  FlightRecorder recorder(8, dir.file("a/b"));
  expect_error<InvalidArgument>([&] { recorder.write("early"); }, {"no process group has been created yet"});
  recorder.add_group("world", 2, {0, 1, 2});
  recorder.ended(recorder.issued(0, all_reduce(0, 5), nullptr), true);
  const std::string path = recorder.write("asked");
  EXPECT_EQ(path, dir.file("a/b/rank_2.flight"));
  const FlightDump d = read_dump(path);
  EXPECT_EQ(d.reason, "asked");
  EXPECT_EQ(d.entries.size(), 1u);
  EXPECT_EQ(::access((path + ".tmp" + std::to_string(::getpid())).c_str(), F_OK), -1) << "the temporary is renamed";
  // Where the folder cannot be: an error naming it and the variable that moves it.
  test::write_file(dir.file("file"), "");
  FlightRecorder blocked(8, dir.file("file/sub"));
  blocked.add_group("world", 0, {0});
  expect_error<IOError>([&] { blocked.write("x"); },
                        {"cannot create the folder", "file/sub", "Not a directory", "DDP_FLIGHT_RECORDER_DIR"});
  EXPECT_FALSE(blocked.dump("x")) << "dump() never throws";
}

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(FlightRecorderConfig, CapacityComesFromTheVariableAndBadValuesAreNamed) {
  const auto capacity = [](std::map<std::string, std::string> vars) {
    VariableProblems problems;
    const FlightSettings flight = read_variables(kFlightVariables, env_of(std::move(vars)), problems);
    problems.check();
    return flight.capacity;
  };
  EXPECT_EQ(capacity({}), kDefaultFlightCapacity);
  EXPECT_EQ(capacity({{"DDP_FLIGHT_RECORDER", ""}}), kDefaultFlightCapacity);
  EXPECT_EQ(capacity({{"DDP_FLIGHT_RECORDER", "0"}}), 0u);
  EXPECT_EQ(capacity({{"DDP_FLIGHT_RECORDER", "100000"}}), 100000u);
  for (const char* bad : {"lots", "-1", "100001", "1e3"}) {
    expect_error<InvalidArgument>(
        [&] {
      capacity({{"DDP_FLIGHT_RECORDER", bad}});
        },
        {"DDP_FLIGHT_RECORDER=\"", bad, "is not a number of operations from 0 to 100000", "0 to turn it off"});
  }
}

TEST(FlightRecorderConfig, TheFolderIsTheVariableOrOnePerJobAndAttempt) {
  EXPECT_EQ(flight_dir(env_of({{"DDP_FLIGHT_RECORDER_DIR", "/logs/x/attempt_0"}}), 5, 7), "/logs/x/attempt_0");
  EXPECT_EQ(flight_dir(env_of({{"TORCHELASTIC_RUN_ID", "a/b"}, {"TORCHELASTIC_RESTART_COUNT", "2"}}), 5, 7),
            "/tmp/ddp-flight-5/a_b/attempt_2");
  EXPECT_EQ(flight_dir(env_of({{"DDP_JOB_ID", "j"}, {"TORCHELASTIC_RUN_ID", "r"}, {"TMPDIR", "/scratch"}}), 5, 7),
            "/scratch/ddp-flight-5/j/attempt_0");
  EXPECT_EQ(flight_dir(env_of({{"MASTER_PORT", "29500"}}), 5, 7), "/tmp/ddp-flight-5/port-29500/attempt_0");
  EXPECT_EQ(flight_dir(env_of({}), 5, 7), "/tmp/ddp-flight-5/pid-7/attempt_0");
  EXPECT_EQ(flight_dump_path("/d", 12), "/d/rank_12.flight");
}

}  // namespace
}  // namespace ddp::detail
