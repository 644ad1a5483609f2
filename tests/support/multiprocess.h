// Multi-process tests: run_ranks() starts `world` real processes, each a copy of the test binary
// running the same test as one rank, and waits for them with a deadline. A hung rank fails the
// test with every rank's output; it never hangs the suite.
//
//   TEST(AllReduce, Sums) {
//     ddp::test::run_ranks(3, [](int rank, int world) {
//       ddp::init_process_group("gloo");   // RANK, WORLD_SIZE, MASTER_ADDR/PORT are set
//       ...EXPECT_EQ(...)...
//     });
//   }
//
// In the parent, run_ranks spawns and waits; in a rank, it runs the body and returns, and the
// gtest verdict of that process becomes its exit code.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddp::test {

struct RankResult {
  int rank = 0;
  int exit_code = -1;  // when exited normally
  int signal = 0;      // when killed by a signal
  std::string output;  // stdout and stderr, interleaved
  bool ok() const { return signal == 0 && exit_code == 0; }
};

struct RunOptions {
  std::chrono::seconds deadline{90};
  std::map<std::string, std::string> env;  // extra variables for every rank
  bool expect_success = true;              // fail the test when a rank fails
  // Ranks that must end killed by SIGKILL (a fault test kills them): the test fails unless exactly
  // these die of SIGKILL and every other rank succeeds. Implies expect_success = false.
  std::vector<int> killed;
  bool set_launch_env = true;  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...
  // Variables for one rank, set last (they override the others).
  std::function<std::map<std::string, std::string>(int rank)> rank_env;
};

// True in a process started by run_ranks.
bool is_rank_process();

std::vector<RankResult> run_ranks(int world, const std::function<void(int rank, int world)>& body,
                                  const RunOptions& options = {});

// A TCP port that was free a moment ago.
int free_port();

// Runs `argv` as a child process with extra environment, capturing its output, with a deadline.
RankResult run_command(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       std::chrono::seconds deadline);

// A stopped peer, for the tests of what the others see: the rank writes its pid to the file that
// $PID_FILE names (RunOptions::env) and stops itself (SIGSTOP), until a running rank ends it with
// the pid that stopped_rank_pid() reads back (0 while there is none). List it in RunOptions::killed.
void stop_this_rank();
int stopped_rank_pid();

}  // namespace ddp::test
