// One ddprun, real workers: their environment, a real all_reduce, output and logs.
#include <sys/stat.h>

#include <filesystem>
#include <regex>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

TEST(SingleNode, EveryWorkerGetsTorchrunsEnvironment) {
  const int port = free_port();
  Launch run(ddprun_worker({"--nproc_per_node=3", "--master_port=" + std::to_string(port)}, {"--print-env"}),
             {{"OMP_NUM_THREADS", kUnset}, {"NCCL_ASYNC_ERROR_HANDLING", kUnset}});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  const auto env = printed_env(run.out());
  ASSERT_EQ(env.size(), 3u) << run.all();
  for (int rank = 0; rank < 3; ++rank) {
    const std::map<std::string, std::string> expected = {
        {"RANK", std::to_string(rank)},
        {"LOCAL_RANK", std::to_string(rank)},
        {"WORLD_SIZE", "3"},
        {"LOCAL_WORLD_SIZE", "3"},
        {"GROUP_RANK", "0"},
        {"GROUP_WORLD_SIZE", "1"},
        {"ROLE_RANK", std::to_string(rank)},
        {"ROLE_WORLD_SIZE", "3"},
        {"ROLE_NAME", "default"},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(port)},
        {"TORCHELASTIC_RESTART_COUNT", "0"},
        {"TORCHELASTIC_MAX_RESTARTS", "0"},
        {"TORCHELASTIC_RUN_ID", "none"},
        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
        {"DDP_STORE_PROTOCOL", "ddp"},
        {"NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"OMP_NUM_THREADS", "1"},
    };
    for (const auto& [name, value] : expected) {
      ASSERT_TRUE(env.at(rank).count(name)) << "rank " << rank << " lacks " << name;
      EXPECT_EQ(env.at(rank).at(name), value) << "rank " << rank << " " << name;
    }
    EXPECT_FALSE(env.at(rank).count("TORCHELASTIC_ERROR_FILE"));  // only with --log_dir
  }
  expect_contains(run.err(), {"note: setting OMP_NUM_THREADS=1"});
}

TEST(SingleNode, TheUsersOmpNumThreadsIsKept) {
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag()}, {"--print-env"}), {{"OMP_NUM_THREADS", "3"}});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  EXPECT_EQ(printed_env(run.out()).at(1).at("OMP_NUM_THREADS"), "3");
  EXPECT_EQ(run.err().find("OMP_NUM_THREADS"), std::string::npos) << run.err();
}

TEST(SingleNode, TheAccelerateFlagsReachEveryWorker) {
  // Given flags set their variables; the one not given comes from ddprun's environment as it was.
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--mixed-precision=bf16", "--cpu"}, {"--print-env"}),
             {{"ACCELERATE_MIXED_PRECISION", "fp16"}, {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3"}});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  const auto env = printed_env(run.out());
  ASSERT_EQ(env.size(), 2u) << run.all();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(env.at(rank).at("ACCELERATE_MIXED_PRECISION"), "bf16");
    EXPECT_EQ(env.at(rank).at("ACCELERATE_USE_CPU"), "true");
    EXPECT_EQ(env.at(rank).at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "3");
  }
}

TEST(SingleNode, WorkersAllReduceThroughTheLaunchersStore) {
  Launch run(ddprun_worker({"--nproc_per_node=3", port_flag()}, {"--allreduce"}));
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  for (int rank = 0; rank < 3; ++rank) {
    expect_contains(run.out(),
                    {"[" + std::to_string(rank) + "]:sum=6 world=3 rank=" + std::to_string(rank) +
                     " local_rank=" + std::to_string(rank) + " attempt=0"},
                    run.all());
  }
}

TEST(SingleNode, TheStoreServesOnlyItsOwnJob) {
  // A worker that claims another job id (DDP_JOB_ID wins over TORCHELASTIC_RUN_ID) is refused.
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--rdzv_id=job-a"}, {"--allreduce"}),
             {{"DDP_JOB_ID", "job-b"}});
  ASSERT_TRUE(run.wait());
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  expect_contains(run.all(), {"belongs to job \"job-a\"", "this process is part of job \"job-b\"", "Root cause"});
}

TEST(SingleNode, StandalonePicksAFreePortAndARunId) {
  Launch a(ddprun_worker({"--standalone", "--nproc_per_node=2"}, {"--print-env", "--allreduce"}));
  Launch b(ddprun_worker({"--standalone", "--nproc_per_node=2"}, {"--print-env", "--allreduce"}));
  ASSERT_TRUE(Launch::wait_all({&a, &b}, 60s));
  ASSERT_EQ(a.exit_code(), 0) << a.all();
  ASSERT_EQ(b.exit_code(), 0) << b.all();
  const auto env_a = printed_env(a.out()).at(0);
  const auto env_b = printed_env(b.out()).at(0);
  EXPECT_NE(env_a.at("MASTER_PORT"), env_b.at("MASTER_PORT"));
  EXPECT_EQ(env_a.at("MASTER_ADDR"), "127.0.0.1");  // needs no resolver (Resolver.StandaloneNeedsNoResolver)
  EXPECT_TRUE(std::regex_match(env_a.at("TORCHELASTIC_RUN_ID"),
                               std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
      << env_a.at("TORCHELASTIC_RUN_ID");
  EXPECT_NE(env_a.at("TORCHELASTIC_RUN_ID"), env_b.at("TORCHELASTIC_RUN_ID"));
  expect_contains(a.out(), {"sum=3 world=2"});
}

TEST(SingleNode, LinesFromDifferentWorkersNeverMix) {
  // Each worker writes 2000-byte lines in 40 pieces with pauses, all at once.
  Launch run(ddprun_worker({"--nproc_per_node=3", port_flag()}, {"--chunks", "6"}));
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  int whole = 0;
  for (const auto& line : lines_starting(run.out(), "[")) {
    const int rank = line[1] - '0';
    ASSERT_EQ(line.substr(0, 4), "[" + std::to_string(rank) + "]:") << line.substr(0, 80);
    EXPECT_EQ(line.substr(4), std::string(2000, static_cast<char>('a' + rank)))
        << "a mixed or broken line: " << line.substr(0, 120);
    ++whole;
  }
  EXPECT_EQ(whole, 18);
  EXPECT_EQ(count(run.out(), "\n"), 18) << "lines without a prefix";
}

TEST(SingleNode, StdoutAndStderrStaySeparate) {
  Launch run({kDdprun, "--nproc_per_node=2", port_flag(), "/bin/sh", "-c", "echo out-$RANK; echo err-$RANK >&2"});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  expect_contains(run.out(), {"[0]:out-0\n", "[1]:out-1\n"});
  expect_contains(run.err(), {"[0]:err-0\n", "[1]:err-1\n"});
  EXPECT_EQ(run.out().find("err-"), std::string::npos);
}

TEST(SingleNode, LogFilesPerRank) {
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag(), "--log_dir=" + dir.file("logs"), "--rdzv_id=job/1"},
                           {"--print-env"}));
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string base = dir.file("logs/job_1/attempt_0/rank_" + std::to_string(rank));
    const std::string log = read_file(base + ".log");
    expect_contains(log,
                    {"ENV RANK=" + std::to_string(rank) + "\n", "ENV TORCHELASTIC_ERROR_FILE=" + base + ".error.json"});
    EXPECT_EQ(log.find("[" + std::to_string(rank) + "]:"), std::string::npos) << "log lines carry no prefix";
  }
  // The console still shows everything (no --redirects).
  expect_contains(run.out(), {"[0]:ENV RANK=0", "[1]:ENV RANK=1"});
}

TEST(SingleNode, RedirectsSendOutputToTheLogsOnly) {
  TempDir dir;
  Launch run({kDdprun, "--nproc_per_node=2", port_flag(), "--log_dir", dir.path(), "--redirects=0:3", "/bin/sh", "-c",
              "echo out-$RANK; echo err-$RANK >&2"});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  EXPECT_EQ(run.out().find("[0]:"), std::string::npos) << run.all();
  EXPECT_EQ(run.err().find("[0]:"), std::string::npos) << run.all();
  expect_contains(run.out(), {"[1]:out-1"});
  EXPECT_EQ(read_file(dir.file("none/attempt_0/rank_0.log")), "out-0\nerr-0\n");
}

TEST(SingleNode, TeeShowsRedirectedStreamsAgain) {
  TempDir dir;
  Launch run({kDdprun, "--nproc_per_node=1", port_flag(), "--log_dir", dir.path(), "-r", "3", "-t", "1", "/bin/sh",
              "-c", "echo out-$RANK; echo err-$RANK >&2"});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  expect_contains(run.out(), {"[0]:out-0"});
  EXPECT_EQ(run.err().find("[0]:err-0"), std::string::npos) << run.all();
  EXPECT_EQ(read_file(dir.file("none/attempt_0/rank_0.log")), "out-0\nerr-0\n");
}

TEST(SingleNode, RedirectsWithoutLogDirUseATemporaryFolder) {
  Launch run({kDdprun, "--nproc_per_node=1", port_flag(), "--redirects=3", "/bin/sh", "-c", "echo hidden"});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  EXPECT_EQ(run.out().find("hidden"), std::string::npos);
  const std::smatch found = [&] {
    std::smatch m;
    std::regex_search(run.err(), m, std::regex("logs go to (/tmp/ddprun-logs-[A-Za-z0-9]+)"));
    return m;
  }();
  ASSERT_EQ(found.size(), 2u) << run.err();
  const std::string folder = found[1];
  EXPECT_EQ(read_file(folder + "/none/attempt_0/rank_0.log"), "hidden\n");
  std::filesystem::remove_all(folder);
}

TEST(SingleNode, LocalRanksFilterShowsOnlySomeRanks) {
  Launch run({kDdprun, "--nproc_per_node=3", port_flag(), "--local_ranks_filter=1,2", "/bin/sh", "-c", "echo r$RANK"});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  EXPECT_EQ(run.out().find("[0]:"), std::string::npos) << "rank 0 was shown:\n" << run.out();
  expect_contains(run.out(), {"[1]:r1", "[2]:r2"});
}

TEST(SingleNode, PythonScriptsRunWithTheInterpreter) {
  TempDir dir;
  write_file(dir.file("show.py"), "import os, sys\nprint('py', os.environ['RANK'], sys.argv[1])\n");
  Launch run({kDdprun, "--nproc_per_node=2", port_flag(), dir.file("show.py"), "arg"},
             {{"DDPRUN_PYTHON", "/usr/bin/python3"}});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  expect_contains(run.out(), {"[0]:py 0 arg", "[1]:py 1 arg"});
  // --no_python: the script runs directly (through its #! line).
  write_file(dir.file("direct.py"), "#!/usr/bin/python3\nimport os\nprint('direct', os.environ['LOCAL_RANK'])\n", true);
  Launch direct({kDdprun, port_flag(), "--no_python", dir.file("direct.py")}, {{"DDPRUN_PYTHON", "/nonexistent"}});
  ASSERT_TRUE(direct.wait());
  ASSERT_EQ(direct.exit_code(), 0) << direct.all();
  expect_contains(direct.out(), {"[0]:direct 0"});
}

TEST(SingleNode, HelpAndVersion) {
  Launch help({kDdprun, "--help"});
  ASSERT_TRUE(help.wait());
  EXPECT_EQ(help.exit_code(), 0);
  expect_contains(help.out(), {"Usage: ddprun", "--nproc_per_node", "--rdzv_endpoint", "--max_restarts"});
  Launch version({kDdprun, "--version"});
  ASSERT_TRUE(version.wait());
  EXPECT_EQ(version.exit_code(), 0);
  expect_contains(version.out(), {"ddprun "});
}

}  // namespace
}  // namespace ddp::launcher::test
