// ddp's store and PyTorch 1.13's torch.distributed.TCPStore, both ways, against the real thing
// (/usr/bin/python3 with PyTorch): our server with Python clients, our client with a Python
// server, C++ ranks launched by torchrun, Python ranks rendezvousing through our server, and the
// rule that picks the protocol under a launcher. Tests that need PyTorch skip when it is missing.
// The byte-level side (every query, every refusal) is in torch_protocol_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <thread>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "store_contract.h"
#include "support/launch.h"
#include "support/multiprocess.h"
#include "util/strings.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;
using detail::cat;

constexpr const char* kPython = "/usr/bin/python3";

struct TorchProbe {
  std::string missing;  // why PyTorch cannot be used here, or ""
  std::string version;  // torch.__version__
};

// Asked once per test binary.
const TorchProbe& torch_probe() {
  static const TorchProbe probe = [] {
    TorchProbe p;
    if (::access(kPython, X_OK) != 0) {
      p.missing = cat(kPython, " does not exist");
      return p;
    }
    auto r = test::run_command(
        {kPython, "-c", "import torch, torch.distributed as d; assert d.is_available(); print(torch.__version__)"}, {},
        120s);
    if (!r.ok()) {
      p.missing = cat("`import torch.distributed` failed in ", kPython, ":\n", r.output);
    } else {
      p.version = r.output.substr(0, r.output.find('\n'));
    }
    return p;
  }();
  return probe;
}

#define SKIP_WITHOUT_TORCH()                                                           \
  if (!torch_probe().missing.empty()) {                                                \
    GTEST_SKIP() << "PyTorch interoperability needs PyTorch 1.13 in " << kPython       \
                 << " (Debian: apt install python3-torch); " << torch_probe().missing; \
  }

// For tests where ddp is the client of a PyTorch server, which must speak 1.13's protocol.
#define SKIP_WITHOUT_TORCH_1_X()                                                                                   \
  SKIP_WITHOUT_TORCH();                                                                                            \
  if (torch_probe().version.rfind("1.", 0) != 0) {                                                                 \
    GTEST_SKIP() << "ddp's PyTorch-protocol client speaks PyTorch 1.13's protocol; " << kPython << " has PyTorch " \
                 << torch_probe().version;                                                                         \
  }

// Runs a Python script (`import`s, the helper `check` and sys.argv in scope) with a deadline.
test::RankResult run_python(const std::string& body, const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& env = {}, std::chrono::seconds deadline = 60s) {
  const std::string prelude =
      "import datetime, os, sys, time\n"
      "import torch, torch.distributed as dist\n"
      "def check(got, want):\n"
      "    if got != want: raise AssertionError(f'got {got!r}, want {want!r}')\n";
  std::vector<std::string> argv = {kPython, "-c", prelude + body};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_command(argv, env, deadline);
}

TCPStoreOptions client_of(std::uint16_t port, StoreProtocol protocol = StoreProtocol::Ddp, std::string job = "") {
  TCPStoreOptions options;
  options.port = port;
  options.timeout = 20s;
  options.protocol = protocol;
  options.job_id = std::move(job);
  return options;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The rule that picks the client's protocol under a launcher.

TEST(TorchCompat, AgentStoreProtocolRule) {
  EXPECT_EQ(agent_store_protocol(std::nullopt), StoreProtocol::Torch);  // torchrun
  EXPECT_EQ(agent_store_protocol(""), StoreProtocol::Torch);
  EXPECT_EQ(agent_store_protocol("torch"), StoreProtocol::Torch);
  EXPECT_EQ(agent_store_protocol("ddp"), StoreProtocol::Ddp);  // ddprun
  for (const char* bad : {"DDP", "gloo", "ddp "}) {
    try {
      agent_store_protocol(std::string(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("DDP_STORE_PROTOCOL"), std::string::npos) << message;
      EXPECT_NE(message.find("\"ddp\""), std::string::npos) << message;
      EXPECT_NE(message.find("\"torch\""), std::string::npos) << message;
      EXPECT_NE(message.find("torchrun"), std::string::npos) << message;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Our server, PyTorch clients.

TEST(TorchCompat, OurServerServesPythonTCPStoreClientsSharingKeysAndWakeUps) {
  SKIP_WITHOUT_TORCH();
  TCPStoreServer server(0, "job-a");
  TCPStore ours(client_of(server.port(), StoreProtocol::Ddp, "job-a"));
  ours.set("/ddp/set", "from ddp");

  // A ddp client's set wakes the Python client's blocking get...
  std::string waker_error;
  std::thread waker([&] {
    try {
      TCPStore c(client_of(server.port(), StoreProtocol::Ddp, "job-a"));
      c.wait({"/py/waiting"}, 30s);
      std::this_thread::sleep_for(200ms);
      c.set("/ddp/late", "woken by ddp");
    } catch (const std::exception& e) {
      waker_error = e.what();
    }
  });
  // ...and the Python client's set wakes a ddp client's blocking get.
  std::string late, waiter_error;
  std::thread waiter([&] {
    try {
      TCPStore c(client_of(server.port(), StoreProtocol::Ddp, "job-a"));
      late = c.get("/py/late", 30s);
    } catch (const std::exception& e) {
      waiter_error = e.what();
    }
  });

  auto result = run_python(R"(
port = int(sys.argv[1])
s = dist.TCPStore("127.0.0.1", port, 1, False, datetime.timedelta(seconds=20))
check(s.get("ddp/set"), b"from ddp")
s.set("py/set", "from python")
s.set("py/binary", b"\x00\x01\xff")
check(s.add("py/counter", 5), 5)
check(s.add("py/counter", -2), 3)
check(s.compare_set("py/cas", "", "first"), b"first")
check(s.compare_set("py/cas", "wrong", "second"), b"first")
check(s.compare_set("py/cas", "first", "second"), b"second")
check(s.compare_set("py/missing", "x", "y"), b"x")
s.wait(["ddp/set", "py/set"])
s.wait(["py/cas"], datetime.timedelta(seconds=5))
s.set("py/doomed", "x")
check(s.delete_key("py/doomed"), True)
check(s.delete_key("py/doomed"), False)
s.set("py/waiting", "1")
check(s.get("ddp/late"), b"woken by ddp")
s.set("py/late", "woken by python")
print("num_keys", s.num_keys())
# A wait that times out: PyTorch 1.13 raises; the connection is then out of step, so use a new one.
t = time.time()
try:
    s.wait(["never"], datetime.timedelta(milliseconds=300))
    raise AssertionError("no timeout")
except RuntimeError as e:
    print("timed out:", e)
assert time.time() - t < 5
s2 = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=20))
check(s2.get("py/set"), b"from python")
print("PYTHON OK")
)",
                           {std::to_string(server.port())});
  waker.join();
  waiter.join();
  ASSERT_TRUE(result.ok()) << result.output;
  EXPECT_NE(result.output.find("PYTHON OK"), std::string::npos) << result.output;
  EXPECT_EQ(waker_error, "");
  EXPECT_EQ(waiter_error, "");
  EXPECT_EQ(late, "woken by python");
  // What Python wrote, as ddp sees it: PyTorch's client put "/" before each key, except its own
  // "init/" counter (a TCPStore with a world size adds 1 to it when it connects).
  EXPECT_EQ(ours.get("/py/set"), "from python");
  EXPECT_EQ(ours.get("/py/binary"), "\x00\x01\xff"s);
  EXPECT_EQ(ours.get("/py/counter"), "3");
  EXPECT_EQ(ours.get("/py/cas"), "second");
  EXPECT_FALSE(ours.check({"/py/doomed"}));
  EXPECT_FALSE(ours.check({"/py/missing"}));
  EXPECT_EQ(ours.get("init/"), "1");
  EXPECT_NE(result.output.find("num_keys " + std::to_string(ours.num_keys())), std::string::npos) << result.output;
  // The timed-out client left; the server is still serving everyone.
  EXPECT_EQ(ours.get("/ddp/set"), "from ddp");
}

// ---------------------------------------------------------------------------------------------
// A Python server, our client.

TEST(TorchCompat, OurTorchClientUsesAPythonTCPStoreServer) {
  SKIP_WITHOUT_TORCH_1_X();
  const auto port = static_cast<std::uint16_t>(test::free_port());
  test::RankResult python;
  std::thread host([&] {
    python = run_python(R"(
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, datetime.timedelta(seconds=30))
s.wait(["cpp/waiting"])
time.sleep(0.2)
s.set("py/late", "woken by python")
check(s.get("cpp/late"), b"woken by c++")
check(s.get("cpp/binary"), b"\x00\x01\xff")
check(s.add("cpp/counter", 1), 8)
s.set("py/added", "1")
s.wait(["cpp/done"])
print("PYTHON OK")
)",
                        {std::to_string(port)});
  });
  try {
    TCPStore store(client_of(port, StoreProtocol::Torch));  // retries until the Python server listens
    store.set("cpp/waiting", "1");
    EXPECT_EQ(store.get("py/late", 30s), "woken by python");  // a Python set wakes our get
    store.clone()->set("cpp/late", "woken by c++");           // and ours wakes Python's
    EXPECT_EQ(store.add("cpp/counter", 7), 7);
    store.set("cpp/binary", "\x00\x01\xff"s);
    store.wait({"py/added"}, 30s);
    EXPECT_EQ(store.get("cpp/counter"), "8");  // after Python's add
    test::check_store_contract(store);         // every operation and error path, against PyTorch's server
    store.set("cpp/done", "1");
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  host.join();
  EXPECT_TRUE(python.ok()) << python.output;
  EXPECT_NE(python.output.find("PYTHON OK"), std::string::npos) << python.output;
}

// ---------------------------------------------------------------------------------------------
// Whole jobs.

// C++ ranks launched by PyTorch 1.13's torchrun: every rank is a client of the agent's PyTorch
// TCPStore (TORCHELASTIC_USE_AGENT_STORE=True, no DDP_STORE_PROTOCOL), and gloo rendezvouses
// through it.
TEST(TorchCompat, TorchrunLaunchesDdpRanks) {
  if (std::getenv("DDP_TEST_UNDER_TORCHRUN")) {  // a rank started by torchrun
    init_process_group("gloo", {.timeout = 30s});
    float value[4] = {1.0f * (get_rank() + 1), 2, 3, 4};
    get_default_group()->all_reduce(Buffer{value, 4, DataType::Float32})->wait();
    EXPECT_EQ(value[0], 3.0f);
    EXPECT_EQ(value[1], 4.0f);
    barrier();
    std::printf("ddp rank %d of %d under torchrun: all_reduce %.0f\n", get_rank(), get_world_size(), value[0]);
    std::fflush(stdout);
    destroy_process_group();
    return;
  }
  SKIP_WITHOUT_TORCH_1_X();
  char exe[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  const std::string filter = "--gtest_filter=TorchCompat.TorchrunLaunchesDdpRanks";
  // --redirects 1 --tee 1: torchrun 1.13 under Python 3.11 fails on its default redirects value
  // (Std.NONE is not found when iterating the flag enum); redirecting stdout avoids that path.
  // Its logs (else /tmp/torchelastic_*, left behind) and temporary files go to a folder removed
  // after the test.
  test::TempDir logs;
  auto result =
      test::run_command({kPython, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                         std::to_string(test::free_port()), "--monitor_interval", "0.1", "--redirects", "1", "--tee",
                         "1", "--log_dir", logs.path(), "--no_python", exe, filter, "--gtest_brief=1"},
                        {{"DDP_TEST_UNDER_TORCHRUN", "1"}, {"TMPDIR", logs.path()}}, 90s);
  EXPECT_TRUE(result.ok()) << result.output;
  EXPECT_FALSE(std::filesystem::is_empty(logs.path())) << "torchrun wrote its logs elsewhere";
  EXPECT_NE(result.output.find("ddp rank 0 of 2 under torchrun: all_reduce 3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("ddp rank 1 of 2 under torchrun: all_reduce 3"), std::string::npos) << result.output;
}

// Python ranks as a ddprun job runs them: our server is the launcher's store, and PyTorch's
// init_process_group("gloo") rendezvouses through it, then all_reduces.
TEST(TorchCompat, PythonRanksRendezvousThroughOurServer) {
  SKIP_WITHOUT_TORCH();
  TCPStoreServer server(0, "job-a");
  std::vector<test::RankResult> results(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      results[rank] = run_python(R"(
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
t = torch.tensor([float(dist.get_rank() + 1), 10.0])
dist.all_reduce(t)
check(t.tolist(), [3.0, 20.0])
dist.barrier()
print("python rank", dist.get_rank(), "all_reduce", int(t[0].item()))
dist.destroy_process_group()
)",
                                 {},
                                 {{"MASTER_ADDR", "127.0.0.1"},
                                  {"MASTER_PORT", std::to_string(server.port())},
                                  {"RANK", std::to_string(rank)},
                                  {"WORLD_SIZE", "2"},
                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                  {"TORCHELASTIC_RESTART_COUNT", "0"},
                                  {"GLOO_SOCKET_IFNAME", "lo"}});
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ":\n" << results[rank].output;
    EXPECT_NE(results[rank].output.find(cat("python rank ", rank, " all_reduce 3")), std::string::npos)
        << results[rank].output;
  }
  // PyTorch's agent-store rendezvous keys, in our store: the init counter of both ranks.
  TCPStore ours(client_of(server.port(), StoreProtocol::Ddp, "job-a"));
  EXPECT_EQ(ours.get("init/"), "2");
}

// Under a launcher's store, DDP_STORE_PROTOCOL picks what C++ ranks speak. The job id proves
// which: only ddp's protocol presents one, so a mismatched id fails with ddp and passes with torch.
TEST(TorchCompat, DdpStoreProtocolPicksWhatRanksSpeakToTheLauncherStore) {
  static std::unique_ptr<TCPStoreServer> server;
  if (!test::is_rank_process()) server = std::make_unique<TCPStoreServer>(0, "job-a");
  const std::string port = server ? std::to_string(server->port()) : "";
  auto env = [&](std::map<std::string, std::string> extra) {
    test::RunOptions options;
    options.env = {{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"MASTER_PORT", port}, {"DDP_JOB_ID", "job-b"}};
    for (auto& [k, v] : extra) options.env[k] = v;
    return options;
  };
  // Each rank prints what it saw; the parent checks that every rank ran its case.
  auto all_reduce_works = [](int rank, int) {
    init_process_group("gloo", {.timeout = 20s});
    std::int64_t v = rank + 1;
    get_default_group()->all_reduce(Buffer{&v, 1, DataType::Int64})->wait();
    EXPECT_EQ(v, 3);
    destroy_process_group();
    std::printf("case done: all_reduce %lld\n", static_cast<long long>(v));
  };
  auto expect_each_rank_printed = [](const std::vector<test::RankResult>& results, const std::string& line) {
    if (test::is_rank_process()) return;
    ASSERT_EQ(results.size(), 2u);
    for (const auto& r : results) EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  };
  // ddprun's way: ddp's protocol, so the job ids must agree.
  auto results = test::run_ranks(
      2,
      [](int, int) {
    try {
      init_process_group("gloo", {.timeout = 20s});
      ADD_FAILURE() << "joined the store of another job";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("job-a"), std::string::npos) << e.what();
      std::printf("case done: %s\n", e.what());
    }
      },
      env({{"DDP_STORE_PROTOCOL", "ddp"}}));
  expect_each_rank_printed(results, "case done: init_process_group");
  results = test::run_ranks(2, all_reduce_works, env({{"DDP_STORE_PROTOCOL", "ddp"}, {"DDP_JOB_ID", "job-a"}}));
  expect_each_rank_printed(results, "case done: all_reduce 3");
  // torchrun's way (no variable): PyTorch's protocol, which has no job id.
  results = test::run_ranks(2, all_reduce_works, env({}));
  expect_each_rank_printed(results, "case done: all_reduce 3");
  // A value that is neither.
  results = test::run_ranks(
      2,
      [](int, int) {
    try {
      init_process_group("gloo", {.timeout = 20s});
      ADD_FAILURE() << "accepted DDP_STORE_PROTOCOL=tcp";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("DDP_STORE_PROTOCOL=\"tcp\""), std::string::npos) << e.what();
      std::printf("case done: %s\n", e.what());
    }
      },
      env({{"DDP_STORE_PROTOCOL", "tcp"}}));
  expect_each_rank_printed(results, "case done: init_process_group");
  server.reset();
}

}  // namespace ddp
