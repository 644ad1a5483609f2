// Shared bits of ddprun's end-to-end tests.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "support/launch.h"

namespace ddp::launcher::test {

using namespace ::ddp::test;  // Launch, TempDir, free_port, ...

inline const std::string kDdprun = DDPRUN_PATH;
inline const std::string kWorker = TEST_WORKER_PATH;

// ddprun FLAGS... test_worker WORKER_ARGS...
inline std::vector<std::string> ddprun_worker(std::vector<std::string> flags,
                                              const std::vector<std::string>& worker_args) {
  std::vector<std::string> argv = {kDdprun};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(kWorker);
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  return argv;
}

inline std::string port_flag() { return "--master_port=" + std::to_string(free_port()); }

// The variables a worker printed with --print-env ("[R]:ENV NAME=VALUE"), by rank.
inline std::map<int, std::map<std::string, std::string>> printed_env(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> env;
  for (const auto& line : lines_starting(out, "[")) {
    const auto close = line.find("]:ENV ");
    if (close == std::string::npos) continue;
    const int rank = std::stoi(line.substr(1, close - 1));
    const std::string item = line.substr(close + 6);
    const auto eq = item.find('=');
    env[rank][item.substr(0, eq)] = item.substr(eq + 1);
  }
  return env;
}

// Waits until every pid is gone (or a zombie); false after `deadline`.
inline bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    bool any = false;
    for (pid_t pid : pids) any = any || process_alive(pid);
    if (!any) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    ::usleep(20000);
  }
}

// Pids written by test_worker --pid-dir: worker_<rank> and child_<rank>.
inline std::vector<pid_t> pids_in(const TempDir& dir, const std::string& kind, int count) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < count; ++rank) {
    const std::string text = read_file(dir.file(kind + "_" + std::to_string(rank)));
    if (!text.empty()) pids.push_back(static_cast<pid_t>(std::stol(text)));
  }
  return pids;
}

// test_worker flags for two workers that train (all_reduce after all_reduce) with a 3 s timeout,
// writing their pids to `dir`.
inline std::vector<std::string> training_worker(const TempDir& dir) {
  return {"--pid-dir", dir.path(), "--train", "100000", "--timeout-ms", "3000", "--step-ms", "20"};
}

// Once both training_workers trained a little, stops rank 1 (SIGSTOP): rank 0 then times out
// waiting for it. Returns both pids (empty, with a test failure, when they are not there).
inline std::vector<pid_t> suspend_rank_1(const TempDir& dir) {
  auto workers = pids_in(dir, "worker", 2);
  EXPECT_EQ(workers.size(), 2u);
  if (workers.size() != 2) return {};
  ::usleep(300000);
  ::kill(workers[1], SIGSTOP);
  return workers;
}

}  // namespace ddp::launcher::test
