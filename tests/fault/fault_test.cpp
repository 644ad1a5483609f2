// docs/RELIABILITY.md, proved: the main job under ddprun, with a rank killed at a random moment
// (with and without restarts), a rank stopped, the store's host killed, the network between two
// "nodes" cut. Every case must end quickly with the cause named (or recover), and leave no process.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include "ddp/torch/checkpoint.h"
#include "final_model.h"
#include "support/launch.h"
#include "support/netns.h"

namespace ddp::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kTimeoutSeconds = 5;  // the collective timeout the jobs here run with

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Training processes whose command line mentions `marker`, by their RANK.
std::map<int, pid_t> trainers(const std::string& marker) {
  std::map<int, pid_t> found;
  DIR* proc = ::opendir("/proc");
  while (dirent* entry = proc ? ::readdir(proc) : nullptr) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    const std::string cmdline = read_all("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find("train_fashion_mnist") == std::string::npos || cmdline.find(marker) == std::string::npos) continue;
    const std::string status = read_all("/proc/" + std::to_string(pid) + "/stat");
    if (status.find(") Z") != std::string::npos) continue;  // a zombie is gone
    const std::string environ = read_all("/proc/" + std::to_string(pid) + "/environ");
    const auto at = environ.find(std::string("\0RANK=", 6));
    if (at != std::string::npos) found[std::atoi(environ.c_str() + at + 6)] = pid;
  }
  if (proc) ::closedir(proc);
  return found;
}

// Waits until `count` trainers of the run are up; empty at the deadline.
std::map<int, pid_t> wait_for_trainers(const std::string& marker, std::size_t count) {
  const auto end = Clock::now() + 60s;
  while (Clock::now() < end) {
    auto found = trainers(marker);
    if (found.size() == count) return found;
    std::this_thread::sleep_for(20ms);
  }
  return {};
}

bool none_left(const std::string& marker) {
  const auto end = Clock::now() + 10s;
  while (Clock::now() < end) {
    if (trainers(marker).empty()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
    }
  }

  // ddprun --nproc_per_node=2 [ddprun flags] train_fashion_mnist <a short run> [flags]
  std::vector<std::string> job(const std::string& run, std::vector<std::string> launcher_flags = {},
                               std::vector<std::string> train_flags = {}) {
    std::vector<std::string> argv = {DDPRUN, "--nproc_per_node=2", "--standalone", "--grace_period=20"};
    argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
    argv.insert(argv.end(), {TRAIN_FASHION_MNIST, "--epochs", "2", "--limit-train", "3072", "--limit-test", "500",
                             "--checkpoint-every", "4", "--log-every", "2", "--timeout",
                             std::to_string(kTimeoutSeconds), "--checkpoint-dir", dir(run)});
    argv.insert(argv.end(), train_flags.begin(), train_flags.end());
    return argv;
  }
  std::string dir(const std::string& run) const { return (root_.path() / run).string(); }

  std::vector<at::Tensor> final_model(const std::string& run) { return test::final_model(dir(run)); }

  struct Root {
    fs::path p = fs::temp_directory_path() / ("ddp-faults-" + std::to_string(::getpid()));
    Root() { fs::remove_all(p); }
    ~Root() { fs::remove_all(p); }
    const fs::path& path() const { return p; }
  } root_;
  std::mt19937 random_{static_cast<unsigned>(std::random_device{}())};
};

// Eight in every CI run (DDP_FAULT_TRIALS for more); bench/fault_trials.py is the long soak, with
// more kinds of fault.
int trials() {
  const char* value = std::getenv("DDP_FAULT_TRIALS");
  return value ? std::max(1, std::atoi(value)) : 8;
}

TEST_F(Faults, ARankKilledAtARandomMomentIsNamedByEveryoneAndNothingIsLeft) {
  for (int trial = 0; trial < trials(); ++trial) {
    const std::string run = "kill" + std::to_string(trial);
    const int victim = static_cast<int>(random_() % 2);
    const auto delay = std::chrono::milliseconds(300 + random_() % 2500);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": rank " + std::to_string(victim) + " killed " +
                 std::to_string(delay.count()) + " ms into training");
    Launch launch(job(run));
    ASSERT_TRUE(launch.wait_for("training on 2 processes", 60s)) << launch.all();
    auto pids = wait_for_trainers(dir(run), 2);
    ASSERT_EQ(pids.size(), 2u) << launch.all();
    std::this_thread::sleep_for(delay);
    // ESRCH: the job finished before the kill (checked below by its exit code).
    ASSERT_TRUE(::kill(pids[victim], SIGKILL) == 0 || errno == ESRCH) << std::strerror(errno);
    const auto killed = Clock::now();
    ASSERT_TRUE(launch.wait(std::chrono::seconds(kTimeoutSeconds + 10 + 20))) << launch.all();
    EXPECT_LT(Clock::now() - killed, std::chrono::seconds(kTimeoutSeconds + 10)) << launch.all();
    if (launch.exit_code() == 0) {
      // The job finished before the kill landed: nothing to check but the cleanup.
      EXPECT_TRUE(launch.out().find("done: test accuracy") != std::string::npos) << launch.all();
    } else {
      const int survivor = 1 - victim;
      EXPECT_TRUE(std::regex_search(
          launch.err(), std::regex("Root cause \\(first failure\\):\\s+rank\\s+: " + std::to_string(victim) + " ")))
          << launch.all();
      EXPECT_NE(launch.err().find("SIGKILL"), std::string::npos) << launch.all();
      // The survivor noticed on its own, naming the lost rank (unless it was already finishing).
      const std::string said = "[" + std::to_string(survivor) + "]:";
      const auto line = launch.all().find(said + "train_fashion_mnist:");
      if (line != std::string::npos) {
        EXPECT_NE(launch.all().find("Lost rank " + std::to_string(victim), line), std::string::npos) << launch.all();
      }
    }
    EXPECT_TRUE(none_left(dir(run))) << "a training process outlived the job";
    // Whatever was being written, the newest checkpoint on disk is usable.
    if (!Checkpoints({.directory = dir(run)}).list().empty()) {
      EXPECT_FALSE(final_model(run).empty());
    }
  }
}

TEST_F(Faults, WithARestartTheJobResumesAndEndsExactlyAsAnUninterruptedRun) {
  Launch reference(job("reference"));
  ASSERT_TRUE(reference.wait(120s)) << reference.all();
  ASSERT_EQ(reference.exit_code(), 0) << reference.all();
  const auto expected = final_model("reference");
  for (int trial = 0; trial < 3; ++trial) {
    const std::string run = "restart" + std::to_string(trial);
    const int victim = static_cast<int>(random_() % 2);
    const auto delay = std::chrono::milliseconds(800 + random_() % 1500);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": rank " + std::to_string(victim) + " killed " +
                 std::to_string(delay.count()) + " ms into training");
    Launch launch(job(run, {"--max_restarts=1"}));
    ASSERT_TRUE(launch.wait_for("training on 2 processes", 60s)) << launch.all();
    auto pids = wait_for_trainers(dir(run), 2);
    ASSERT_EQ(pids.size(), 2u) << launch.all();
    std::this_thread::sleep_for(delay);
    const auto newest = Checkpoints({.directory = dir(run)}).list();
    // ESRCH: the job finished before the kill (a fast machine trains in under a second or two).
    ASSERT_TRUE(::kill(pids[victim], SIGKILL) == 0 || errno == ESRCH) << std::strerror(errno);
    ASSERT_TRUE(launch.wait(120s)) << launch.all();
    ASSERT_EQ(launch.exit_code(), 0) << launch.all();
    if (launch.err().find("restarting") == std::string::npos &&
        launch.all().find("resumed from") == std::string::npos) {
      continue;  // finished before the kill landed
    }
    // It lost at most one checkpoint interval: it resumed from the newest checkpoint written
    // before the kill (or a newer one, written between our look and the kill).
    if (!newest.empty()) {
      std::smatch m;
      const std::string all = launch.all();
      ASSERT_TRUE(std::regex_search(all, m, std::regex("resumed from \\S*checkpoint-0*([0-9]+)\\.ckpt"))) << all;
      const auto step = std::stoll(m[1]);
      const auto before = std::stoll(newest.front().substr(newest.front().rfind('-') + 1));
      EXPECT_GE(step, before) << all;
    }
    auto got = final_model(run);
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], expected[i])) << "tensor " << i;
    EXPECT_TRUE(none_left(dir(run)));
  }
}

TEST_F(Faults, AStoppedRankFailsTheOthersAfterTheTimeoutNamingItAndTheCollective) {
  Launch launch(job("stop"));
  ASSERT_TRUE(launch.wait_for("training on 2 processes", 60s)) << launch.all();
  auto pids = wait_for_trainers(dir("stop"), 2);
  ASSERT_EQ(pids.size(), 2u);
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(::kill(pids[1], SIGSTOP), 0);
  const auto stopped = Clock::now();
  ASSERT_TRUE(launch.wait(60s)) << launch.all();
  const auto took = Clock::now() - stopped;
  EXPECT_GE(took, std::chrono::seconds(kTimeoutSeconds) - 500ms) << launch.all();
  EXPECT_LT(took, std::chrono::seconds(kTimeoutSeconds + 10)) << launch.all();
  EXPECT_NE(launch.exit_code(), 0);
  const std::string all = launch.all();
  // "barrier #19 in group ..." or "all_reduce #17 (float32 x 220426, SUM) in group ...".
  const std::string op = "\\S+ #[0-9]+( \\([^)]*\\))?";
  EXPECT_TRUE(std::regex_search(
      all, std::regex("\\[0\\]:train_fashion_mnist: .*" + op + " in group 'world' on rank 0 timed out after 5.0 s")))
      << all;
  // Stopped before the collective, or inside it (it then finishes its part once continued).
  EXPECT_TRUE(std::regex_search(all, std::regex("Ranks that had not reached " + op + ": rank 1: ")) ||
              std::regex_search(all, std::regex("Every rank reached " + op + "; still inside it: rank 1\\.")))
      << all;
  EXPECT_TRUE(none_left(dir("stop"))) << "the stopped rank outlived the job";
}

TEST_F(Faults, TheStoreHostDyingEndsTheOthersWithAClearError) {
  // Without a launcher, rank 0 hosts the store.
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Launch>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::make_unique<Launch>(
        std::vector<std::string>{TRAIN_FASHION_MNIST, "--epochs", "2", "--limit-train", "3072", "--limit-test", "500",
                                 "--timeout", std::to_string(kTimeoutSeconds), "--checkpoint-dir", dir("host")},
        std::map<std::string, std::string>{{"RANK", std::to_string(rank)},
                                           {"WORLD_SIZE", "2"},
                                           {"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", port},
                                           {"OMP_NUM_THREADS", "1"}}));
  }
  ASSERT_TRUE(ranks[0]->wait_for("training on 2 processes", 60s)) << ranks[0]->all();
  std::this_thread::sleep_for(700ms);
  ranks[0]->signal(SIGKILL);
  const auto killed = Clock::now();
  ASSERT_TRUE(ranks[1]->wait(std::chrono::seconds(kTimeoutSeconds + 20))) << ranks[1]->all();
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(kTimeoutSeconds + 10));
  EXPECT_EQ(ranks[1]->exit_code(), 1) << ranks[1]->all();
  EXPECT_NE(ranks[1]->err().find("rank 0, or the launcher"), std::string::npos) << ranks[1]->all();
  // Under ddprun the launcher hosts the store: killing it takes every worker with it.
  Launch launch(job("launcher"));
  ASSERT_TRUE(launch.wait_for("training on 2 processes", 60s)) << launch.all();
  ASSERT_EQ(wait_for_trainers(dir("launcher"), 2).size(), 2u);
  ::kill(launch.pid(), SIGKILL);
  EXPECT_TRUE(none_left(dir("launcher"))) << "workers outlived their launcher";
}

TEST_F(Faults, ANetworkFaultBetweenTwoNodesIsAnErrorWithinTheTimeout) {
  TwoNodeNetwork net;
  REQUIRE_NETWORK(net);
  auto node = [&](int rank) {
    auto argv = job("net" + std::to_string(rank),
                    {"--nnodes=2", "--node_rank=" + std::to_string(rank), "--master_addr=10.200.0.1",
                     "--master_port=29533", "--nproc_per_node=1", "--rdzv_conf=join_timeout=30"});
    argv.erase(std::find(argv.begin(), argv.end(), std::string("--nproc_per_node=2")));
    argv.erase(std::find(argv.begin(), argv.end(), std::string("--standalone")));
    return rank == 0 ? net.in_a(argv) : net.in_b(argv);
  };
  // Both "nodes" share this kernel, so the shared-memory path would carry their traffic past the
  // cut link: make them talk over the network, as two real hosts do.
  const std::map<std::string, std::string> env = {{"DDP_SHM", "0"}};
  Launch a(node(0), env), b(node(1), env);
  ASSERT_TRUE(a.wait_for("training on 2 processes", 60s)) << a.all() << b.all();
  std::this_thread::sleep_for(800ms);
  ASSERT_TRUE(net.set_link(false));
  const auto cut = Clock::now();
  ASSERT_TRUE(Launch::wait_all({&a, &b}, std::chrono::seconds(kTimeoutSeconds + 60))) << a.all() << b.all();
  EXPECT_NE(a.exit_code(), 0) << a.all();
  EXPECT_NE(b.exit_code(), 0) << b.all();
  const std::string all = a.all() + b.all();
  EXPECT_TRUE(all.find("timed out after 5.0 s") != std::string::npos || all.find("Lost rank") != std::string::npos)
      << all;
  EXPECT_LT(Clock::now() - cut, std::chrono::seconds(kTimeoutSeconds + 40)) << all;
}

}  // namespace
}  // namespace ddp::test
