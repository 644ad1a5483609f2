// init_process_group's contract and each of its error paths, with real processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using test::expect_error;

using namespace std::chrono_literals;

test::RunOptions with_env(std::map<std::string, std::string> env) {
  test::RunOptions options;
  options.env = std::move(env);
  return options;
}

TEST(InitProcessGroup, EnvInitGivesRanksAndBarrierWorks) {
  test::run_ranks(4, [](int rank, int world) {
    EXPECT_FALSE(is_initialized());
    init_process_group("gloo", {.timeout = 30s});
    EXPECT_TRUE(is_initialized());
    EXPECT_EQ(get_rank(), rank);
    EXPECT_EQ(get_world_size(), world);
    EXPECT_EQ(get_local_rank(), rank);
    EXPECT_EQ(get_local_world_size(), world);
    EXPECT_EQ(get_backend(), "gloo");
    barrier();
    destroy_process_group();
    EXPECT_FALSE(is_initialized());
    // More lives in the same processes, back to back on the same port: a rank that comes back
    // first must not join the store rank 0 is still tearing down.
    for (int life = 0; life < 4; ++life) {
      init_process_group("gloo", {.timeout = 30s});
      std::int64_t x = 1;
      get_default_group()->all_reduce(buffer_of(&x, 1))->wait();
      EXPECT_EQ(x, world);
      destroy_process_group();
    }
  });
}

TEST(InitProcessGroup, TcpAndFileInitMethods) {
  const std::string port = std::to_string(test::free_port());
  const std::string file = "/tmp/ddp-init-test-" + std::to_string(::getpid());
  test::run_ranks(
      3,
      [&](int rank, int world) {
    init_process_group("gloo", {.init_method = "tcp://127.0.0.1:" + std::string(std::getenv("TEST_PORT")),
                                .world_size = world,
                                .rank = rank,
                                .timeout = 30s});
    barrier();
    destroy_process_group();
    init_process_group("gloo", {.init_method = "file://" + std::string(std::getenv("TEST_FILE")),
                                .world_size = world,
                                .rank = rank,
                                .timeout = 30s});
    std::int64_t x = rank;
    get_default_group()->all_reduce(buffer_of(&x, 1), ReduceOp::MAX)->wait();
    EXPECT_EQ(x, world - 1);
    destroy_process_group();
      },
      {.env = {{"TEST_PORT", port}, {"TEST_FILE", file}}, .set_launch_env = false});
  EXPECT_NE(::access(file.c_str(), F_OK), 0) << "the FileStore's file outlived the job";
}

TEST(InitProcessGroup, AGroupOfOneNeedsNoLauncher) {
  init_process_group();  // no RANK, WORLD_SIZE or MASTER_* in this process
  EXPECT_EQ(get_rank(), 0);
  EXPECT_EQ(get_world_size(), 1);
  float x[3] = {1, 2, 3};
  get_default_group()->all_reduce(buffer_of(x, 3), ReduceOp::AVG)->wait();
  EXPECT_EQ(x[2], 3);
  barrier();
  destroy_process_group();
}

TEST(InitProcessGroup, CalledTwiceIsAnError) {
  init_process_group("gloo");
  expect_error<Error>([] { init_process_group("gloo"); }, {"called twice", "destroy_process_group"});
  destroy_process_group();
}

TEST(InitProcessGroup, UnknownBackendListsTheKnownOnes) {
  expect_error<InvalidArgument>([] { init_process_group("mpi"); }, {"unknown backend \"mpi\"", "\"gloo\"", "\"nccl\""});
  EXPECT_FALSE(is_initialized());
}

TEST(InitProcessGroup, BadEnvironmentIsNamed) {
  test::run_ranks(
      1,
      [](int, int) {
    expect_error<InvalidArgument>([] { init_process_group("gloo"); }, {"RANK=\"zero\"", "non-negative integer"});
      },
      with_env({{"RANK", "zero"}}));
  test::run_ranks(
      1,
      [](int, int) {
    expect_error<InvalidArgument>([] { init_process_group("gloo"); }, {"RANK 2 is outside the world of 2", "0 to 1"});
      },
      with_env({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
  test::run_ranks(
      1,
      [](int, int) {
    expect_error<InvalidArgument>([] { init_process_group("gloo"); }, {"MASTER_ADDR is not set", "tcp://host:port"});
      },
      {.env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}}, .set_launch_env = false});
  test::run_ranks(
      1,
      [](int, int) { expect_error<InvalidArgument>([] { init_process_group("gloo"); }, {"MASTER_PORT is not set"}); },
      {.env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}, .set_launch_env = false});
}

TEST(InitProcessGroup, MasterPortInUse) {
  TCPStoreServer squatter(0, "");
  test::run_ranks(
      1,
      [](int, int) {
    expect_error<IOError>([] { init_process_group("gloo", {.timeout = 5s}); },
                          {"init_process_group", "port " + std::string(std::getenv("MASTER_PORT")), "in use"});
      },
      {.env = {{"RANK", "0"},
               {"WORLD_SIZE", "2"},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(squatter.port())}},
       .set_launch_env = false});
}

TEST(InitProcessGroup, MasterUnreachableWithinTheTimeout) {
  test::run_ranks(
      1,
      [](int, int) {
    const auto start = std::chrono::steady_clock::now();
    expect_error<TimeoutError>([] { init_process_group("gloo", {.timeout = 1s}); },
                               {"127.0.0.1:" + std::string(std::getenv("MASTER_PORT")), "MASTER_ADDR"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
      },
      {.env = {{"RANK", "1"},
               {"WORLD_SIZE", "2"},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(test::free_port())}},
       .set_launch_env = false});
}

TEST(InitProcessGroup, TwoProcessesClaimingOneRankAreToldSo) {
  // Ranks 0, 1, 1: the world of 3 never completes; everybody hears why.
  test::run_ranks(
      3,
      [](int index, int) {
    expect_error<MismatchError>([] { init_process_group("gloo", {.timeout = 10s}); },
                                {"two processes claim rank 1", "own RANK"});
      },
      {.rank_env = [](int index) {
        return std::map<std::string, std::string>{{"RANK", index == 2 ? "1" : std::to_string(index)}};
      }});
}

TEST(InitProcessGroup, RanksDisagreeingOnTheWorldSize) {
  test::run_ranks(
      2,
      [](int rank, int) {
    expect_error<MismatchError>([] { init_process_group("gloo", {.timeout = 10s}); },
                                {"disagree on the size", "same WORLD_SIZE"});
      },
      {.rank_env = [](int index) {
        return std::map<std::string, std::string>{{"WORLD_SIZE", index == 0 ? "2" : "3"}};
      }});
}

}  // namespace
}  // namespace ddp
