// The real clients: PyTorch's own torchrun, and PyTorch's own DDP under ddprun.
// (Debian's torchrun crashes on Python 3.11 unless every local rank's output is redirected and
// teed: "--redirects 1 --tee 1 --log_dir DIR" works; "3" does not, and neither does the default.)
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

const std::string kPython = "/usr/bin/python3";

bool have_torch() {
  static const bool found = [] {
    Launch probe({kPython, "-c", "import torch.distributed.run"});
    return probe.wait(60s) && probe.exit_code() == 0;
  }();
  return found;
}

// torchrun made its run's folder (<run id>_XXXXXXXX) under --log_dir, not in /tmp.
void expect_torchrun_logs_in(const TempDir& logs) {
  bool found = false;
  for (const auto& entry : std::filesystem::directory_iterator(logs.path())) {
    found = found || entry.path().filename().string().rfind("none_", 0) == 0;
  }
  EXPECT_TRUE(found) << "torchrun's logs are not in " << logs.path();
}

#define REQUIRE_TORCH() \
  if (!have_torch()) GTEST_SKIP() << kPython << " cannot import torch: these tests need PyTorch there"

// torchrun's logs go to --log_dir (else to /tmp/torchelastic_*, left behind), its temporary
// files to TMPDIR: both inside `logs`, which the test removes.
std::vector<std::string> torchrun(const TempDir& logs, int port, std::vector<std::string> rest) {
  std::vector<std::string> argv = {kPython,
                                   "-m",
                                   "torch.distributed.run",
                                   "--nproc_per_node=2",
                                   "--master_port=" + std::to_string(port),
                                   "--redirects",
                                   "1",
                                   "--tee",
                                   "1",
                                   "--log_dir",
                                   logs.path(),
                                   "--no_python"};
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

// "[default0]:NAME=VALUE" lines of torchrun's console, by local rank.
std::map<int, std::map<std::string, std::string>> torchrun_env(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> env;
  const std::regex line("^\\[default([0-9]+)\\]:([A-Za-z_][A-Za-z0-9_]*)=(.*)$");
  std::istringstream in(out);
  for (std::string text; std::getline(in, text);) {
    std::smatch m;
    if (std::regex_match(text, m, line)) env[std::stoi(m[1])][m[2]] = m[3];
  }
  return env;
}

// The variables Python's own startup adds to its environment under `env` (on top of this
// process's): PEP 538's LC_CTYPE coercion when no locale is set (`env -i`), and the like.
// torchrun's children inherit them from its interpreter; they are no part of its contract.
std::set<std::string> added_by_python(const std::map<std::string, std::string>& env) {
  Launch probe({kPython, "-c", "import os\nfor name in os.environ: print(name)"}, env);
  EXPECT_TRUE(probe.wait(60s));
  std::set<std::string> added;
  std::istringstream in(probe.out());
  for (std::string name; std::getline(in, name);) {
    auto given = env.find(name);
    const bool ours = given != env.end() ? given->second != kUnset : std::getenv(name.c_str()) != nullptr;
    if (!ours) added.insert(name);
  }
  return added;
}

TEST(Interop, DdprunSetsTheEnvironmentTorchrunSets) {
  REQUIRE_TORCH();
  TempDir logs;
  const int torch_port = free_port();
  const std::map<std::string, std::string> clean = {
      {"OMP_NUM_THREADS", kUnset}, {"NCCL_ASYNC_ERROR_HANDLING", kUnset}, {"TMPDIR", logs.path()}};
  const std::set<std::string> interpreters = added_by_python(clean);
  Launch theirs(torchrun(logs, torch_port, {"env"}), clean);
  const int our_port = free_port();
  Launch ours(
      {kDdprun, "--nproc_per_node=2", "--master_port=" + std::to_string(our_port), "--log_dir", logs.path(), "env"},
      clean);
  ASSERT_TRUE(Launch::wait_all({&theirs, &ours}, 90s));
  ASSERT_EQ(theirs.exit_code(), 0) << theirs.all();
  ASSERT_EQ(ours.exit_code(), 0) << ours.all();
  const auto expected = torchrun_env(theirs.out());
  std::map<int, std::map<std::string, std::string>> got;
  const std::regex line("^\\[([0-9]+)\\]:([A-Za-z_][A-Za-z0-9_]*)=(.*)$");
  std::istringstream in(ours.out());
  for (std::string text; std::getline(in, text);) {
    std::smatch m;
    if (std::regex_match(text, m, line)) got[std::stoi(m[1])][m[2]] = m[3];
  }
  ASSERT_EQ(expected.size(), 2u) << theirs.all();
  ASSERT_EQ(got.size(), 2u) << ours.all();
  int compared = 0;
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& [name, value] : expected.at(rank)) {
      if (std::getenv(name.c_str()) && name != "OMP_NUM_THREADS") continue;  // inherited, not set by torchrun
      if (name == "_") continue;                                             // the shell's last command
      if (interpreters.count(name)) continue;                                // torchrun's Python, not torchrun
      ASSERT_TRUE(got.at(rank).count(name)) << "ddprun does not set " << name << " (torchrun: " << value << ")";
      if (name == "MASTER_PORT") {
        EXPECT_EQ(value, std::to_string(torch_port));
        EXPECT_EQ(got.at(rank).at(name), std::to_string(our_port));
      } else if (name == "TORCHELASTIC_ERROR_FILE") {
        EXPECT_NE(got.at(rank).at(name).find(logs.path()), std::string::npos);  // a path under --log_dir, as theirs
      } else {
        EXPECT_EQ(got.at(rank).at(name), value) << name << " differs from torchrun's";
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 2 * 17) << "torchrun set fewer variables than expected:\n" << theirs.out();
  expect_torchrun_logs_in(logs);
}

TEST(Interop, TorchrunLaunchesADdpProgram) {
  REQUIRE_TORCH();
  TempDir logs;
  Launch run(torchrun(logs, free_port(), {kWorker, "--allreduce"}), {{"TMPDIR", logs.path()}});
  ASSERT_TRUE(run.wait(90s));
  EXPECT_EQ(run.exit_code(), 0) << run.all();
  expect_torchrun_logs_in(logs);
  expect_contains(run.out(),
                  {"[default0]:sum=3 world=2 rank=0 local_rank=0 attempt=0",
                   "[default1]:sum=3 world=2 rank=1 local_rank=1 attempt=0"},
                  run.all());
}

TEST(Interop, DdprunLaunchesAPyTorchDdpScript) {
  REQUIRE_TORCH();
  Launch run({kDdprun, "--nproc_per_node=2", port_flag(), kPython, std::string(LAUNCHER_TEST_DIR) + "/ddp_gloo.py"},
             {{"GLOO_SOCKET_IFNAME", "lo"}});
  ASSERT_TRUE(run.wait(90s));
  EXPECT_EQ(run.exit_code(), 0) << run.all();
  expect_contains(run.out(),
                  {"[0]:ddp rank=0 world=2 same=True matches_reference=True local_rank=0",
                   "[1]:ddp rank=1 world=2 same=True matches_reference=True local_rank=1"},
                  run.all());
}

}  // namespace
}  // namespace ddp::launcher::test
