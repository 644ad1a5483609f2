// Several ddprun agents (one per "node", here all on this machine) forming one job.
#include <signal.h>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> static_node(int node_rank, int port, std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"--nnodes=2",
                                    "--node_rank=" + std::to_string(node_rank),
                                    "--nproc_per_node=2",
                                    "--master_addr=127.0.0.1",
                                    "--master_port=" + std::to_string(port),
                                    "--rdzv_conf=join_timeout=20"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

TEST(MultiNode, TwoStaticAgentsFormOneJob) {
  const int port = free_port();
  // Node 1 first: it waits for node 0, which hosts the store.
  Launch node1(ddprun_worker(static_node(1, port), {"--print-env", "--allreduce"}));
  Launch node0(ddprun_worker(static_node(0, port), {"--print-env", "--allreduce"}));
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 60s));
  ASSERT_EQ(node0.exit_code(), 0) << node0.all();
  ASSERT_EQ(node1.exit_code(), 0) << node1.all();
  expect_contains(node0.out(), {"[0]:sum=10 world=4 rank=0 local_rank=0", "[1]:sum=10 world=4 rank=1 local_rank=1"},
                  node0.all());
  expect_contains(node1.out(), {"[2]:sum=10 world=4 rank=2 local_rank=0", "[3]:sum=10 world=4 rank=3 local_rank=1"},
                  node1.all());
  const auto env = printed_env(node1.out());
  ASSERT_EQ(env.size(), 2u);
  for (const auto& [rank, vars] : env) {
    EXPECT_EQ(vars.at("RANK"), std::to_string(rank));
    EXPECT_EQ(vars.at("LOCAL_RANK"), std::to_string(rank - 2));
    EXPECT_EQ(vars.at("WORLD_SIZE"), "4");
    EXPECT_EQ(vars.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(vars.at("GROUP_RANK"), "1");
    EXPECT_EQ(vars.at("GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(vars.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(vars.at("MASTER_PORT"), std::to_string(port));
  }
  expect_contains(node1.err(), {"joining job \"none\"", "node 1 of 2: ranks 2 to 3 of 4"});
  expect_contains(node0.err(), {"hosting job \"none\"", "node 0 of 2: ranks 0 to 1 of 4"});
}

TEST(MultiNode, C10dAgentsTakeNodeRanksInArrivalOrder) {
  const std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> flags = {"--nnodes=2",         "--rdzv_backend=c10d", endpoint,
                                          "--rdzv_id=arrivals", "--nproc_per_node=1",  "--rdzv_conf=join_timeout=20"};
  Launch first(ddprun_worker(flags, {"--print-env", "--allreduce"}));
  ASSERT_TRUE(first.wait_for("waiting for 2 nodes")) << first.all();
  Launch second(ddprun_worker(flags, {"--print-env", "--allreduce"}));
  ASSERT_TRUE(Launch::wait_all({&first, &second}, 60s));
  ASSERT_EQ(first.exit_code(), 0) << first.all();
  ASSERT_EQ(second.exit_code(), 0) << second.all();
  expect_contains(first.out(),
                  {"[0]:sum=3 world=2 rank=0", "[0]:ENV GROUP_RANK=0", "[0]:ENV TORCHELASTIC_RUN_ID=arrivals"},
                  first.all());
  expect_contains(second.out(), {"[1]:sum=3 world=2 rank=1", "[1]:ENV GROUP_RANK=1", "[1]:ENV MASTER_ADDR=127.0.0.1"},
                  second.all());
}

TEST(MultiNode, AFailureOnOneNodeStopsEveryNode) {
  const int port = free_port();
  Launch node0(ddprun_worker(static_node(0, port),
                             {"--fail-rank", "3", "--fail-code", "5", "--fail-delay-ms", "500", "--then", "sleep"}));
  Launch node1(ddprun_worker(static_node(1, port),
                             {"--fail-rank", "3", "--fail-code", "5", "--fail-delay-ms", "500", "--then", "sleep"}));
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 60s));
  EXPECT_EQ(node0.exit_code(), 1) << node0.all();
  EXPECT_EQ(node1.exit_code(), 1) << node1.all();
  for (Launch* node : {&node0, &node1}) {
    expect_contains(node->err(),
                    {"rank       : 3 (local rank 1 on node 1)", "exit       : exit code 5", "[3]: rank 3 failing"},
                    node->all());
  }
  expect_contains(node0.out(), {"[0]:rank 0 got SIGTERM", "[1]:rank 1 got SIGTERM"}, node0.all());
  expect_contains(node1.out(), {"[2]:rank 2 got SIGTERM"}, node1.all());
}

TEST(MultiNode, RestartsHappenInStep) {
  const int port = free_port();
  const std::vector<std::string> worker = {"--allreduce", "--fail-rank", "2", "--fail-below-restart", "1"};
  Launch node0(ddprun_worker(static_node(0, port, {"--max_restarts=1"}), worker));
  Launch node1(ddprun_worker(static_node(1, port, {"--max_restarts=1"}), worker));
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 60s));
  EXPECT_EQ(node0.exit_code(), 0) << node0.all();
  EXPECT_EQ(node1.exit_code(), 0) << node1.all();
  expect_contains(node0.out(), {"[0]:sum=10 world=4 rank=0 local_rank=0 attempt=1"}, node0.all());
  expect_contains(node1.out(), {"[3]:sum=10 world=4 rank=3 local_rank=1 attempt=1"}, node1.all());
  expect_contains(node0.err(), {"restarting every worker (attempt 2)", "rank       : 2 (local rank 0 on node 1)"},
                  node0.all());
}

TEST(MultiNode, TheRootCauseIsTheRankAnotherNodeWaitedFor) {
  // One worker per node; node 1's is stopped (SIGSTOP); node 0's times out after 3 s.
  const int port = free_port();
  TempDir dir;
  auto node = [&](int rank) {
    return ddprun_worker(
        {"--nnodes=2", "--node_rank=" + std::to_string(rank), "--nproc_per_node=1", "--master_addr=127.0.0.1",
         "--master_port=" + std::to_string(port), "--rdzv_conf=join_timeout=20"},
        training_worker(dir));
  };
  Launch node0(node(0));
  Launch node1(node(1));
  ASSERT_TRUE(node0.wait_for("[0]:rank 0 training")) << node0.all();
  ASSERT_TRUE(node1.wait_for("[1]:rank 1 training")) << node1.all();
  const auto workers = suspend_rank_1(dir);
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 60s));
  const std::string pid1 = std::to_string(workers[1]);
  for (Launch* n : {&node0, &node1}) {
    EXPECT_EQ(n->exit_code(), 1) << n->all();
    expect_contains(
        n->err(),
        {"Root cause: rank 1, which the first failure waited for\n  rank       : 1 (local rank 0 on node 1)",
         "  pid        : see the summary of node 1", "  evidence   : rank 0's error says it waited for rank 1: ",
         "First failure (a consequence of the root cause):\n  rank       : 0 (local rank 0 on node 0)"},
        n->all());
  }
  expect_contains(node1.err(),
                  {"rank 1 (local rank 0, pid " + pid1 +
                   "): stopped by ddprun (signal SIGTERM (15)); it "
                   "had been suspended (state T in /proc/" +
                   pid1 +
                   "/stat) when the attempt ended  <- "
                   "root cause"},
                  node1.all());
  EXPECT_TRUE(all_gone(workers));
}

TEST(MultiNode, AVanishedAgentEndsTheJob) {
  TempDir dir;
  const int port = free_port();
  Launch node0(ddprun_worker(static_node(0, port, {"--max_restarts=3"}), {"--then", "sleep"}));
  Launch node1(ddprun_worker(static_node(1, port, {"--max_restarts=3"}), {"--pid-dir", dir.path(), "--then", "sleep"}));
  ASSERT_TRUE(node1.wait_for("[2]:rank 2 sleeping")) << node1.all();
  ASSERT_TRUE(node1.wait_for("[3]:rank 3 sleeping")) << node1.all();
  ASSERT_TRUE(node0.wait_for("[0]:rank 0 sleeping")) << node0.all();
  const auto start = Clock::now();
  ::kill(node1.pid(), SIGKILL);
  ASSERT_TRUE(node0.wait(30s));
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_EQ(node0.exit_code(), 1) << node0.all();
  expect_contains(node0.err(), {"Root cause: the ddprun of node 1", "vanished"}, node0.all());
  EXPECT_EQ(node0.err().find("restarting"), std::string::npos) << "no restart without all nodes:\n" << node0.all();
  expect_contains(node0.out(), {"[0]:rank 0 got SIGTERM"}, node0.all());
  ASSERT_TRUE(node1.wait(10s));
  std::vector<pid_t> workers;
  for (const char* name : {"worker_2", "worker_3"}) workers.push_back(std::stoi("0" + read_file(dir.file(name))));
  EXPECT_TRUE(all_gone(workers));
}

TEST(MultiNode, SigintOnOneNodeStopsEveryNode) {
  const int port = free_port();
  Launch node0(ddprun_worker(static_node(0, port, {"--max_restarts=2"}), {"--then", "sleep"}));
  Launch node1(ddprun_worker(static_node(1, port, {"--max_restarts=2"}), {"--then", "sleep"}));
  // Every worker must be in its sleep (its handlers installed) before the signal.
  for (const char* line : {"[0]:rank 0 sleeping", "[1]:rank 1 sleeping"})
    ASSERT_TRUE(node0.wait_for(line)) << node0.all();
  for (const char* line : {"[2]:rank 2 sleeping", "[3]:rank 3 sleeping"})
    ASSERT_TRUE(node1.wait_for(line)) << node1.all();
  node1.signal(SIGINT);
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 30s));
  EXPECT_EQ(node1.exit_code(), 128 + SIGINT) << node1.all();
  EXPECT_EQ(node0.exit_code(), 128 + SIGINT) << node0.all();
  // A requested stop on every node, not a failure.
  for (Launch* node : {&node0, &node1}) {
    expect_contains(node->err(),
                    {"the job was stopped by SIGINT (a request, not a failure): ddprun on node 1",
                     "received SIGINT and stopped the job"},
                    node->all());
    EXPECT_EQ(node->err().find("failed"), std::string::npos) << node->all();
  }
  expect_contains(node0.out(), {"[0]:rank 0 got SIGTERM"}, node0.all());
  expect_contains(node1.out(), {"[2]:rank 2 got SIGINT"}, node1.all());
}

TEST(MultiNode, ANodeRankClaimedTwiceIsRefused) {
  const int port = free_port();
  const std::vector<std::string> flags = {"--nnodes=3", "--master_port=" + std::to_string(port),
                                          "--rdzv_conf=join_timeout=3"};
  auto with = [&](const std::string& rank) {
    auto f = flags;
    f.push_back("--node_rank=" + rank);
    return ddprun_worker(f, {});
  };
  Launch node0(with("0"));
  Launch first(with("1"));
  ASSERT_TRUE(node0.wait_for("hosting job")) << node0.all();
  ASSERT_TRUE(first.wait_for("joining job")) << first.all();
  ::usleep(300000);
  Launch second(with("1"));
  ASSERT_TRUE(Launch::wait_all({&node0, &first, &second}, 30s));
  EXPECT_EQ(second.exit_code(), 1) << second.all();
  expect_contains(second.err(), {"node rank 1 is already taken by ddprun pid", "its own --node_rank"}, second.all());
  // The others give up after join_timeout, naming the node that never came.
  EXPECT_EQ(node0.exit_code(), 1) << node0.all();
  expect_contains(node0.err(), {"node rank 2 did not join", "(2 of 3 nodes are here)", "join_timeout"}, node0.all());
}

TEST(MultiNode, NodesMustAgreeOnTheFlags) {
  const int port = free_port();
  const auto start = Clock::now();
  Launch node0(ddprun_worker(static_node(0, port, {"--max_restarts=1"}), {}));
  Launch node1(ddprun_worker(static_node(1, port, {"--max_restarts=2"}), {}));
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 30s));
  EXPECT_LT(Clock::now() - start, 10s) << "node 0 waited for its join timeout (20 s) instead of hearing of node 1";
  EXPECT_EQ(node1.exit_code(), 1) << node1.all();
  expect_contains(node1.err(), {"flags differ from the first node's", "max_restarts=2", "max_restarts=1"}, node1.all());
  EXPECT_EQ(node0.exit_code(), 1) << node0.all();
  // Still joining ("the job could not start: ...") or already waiting for the first attempt
  // ("Root cause: ..."), node 0 names node 1 and why.
  expect_contains(node0.err(), {"the ddprun of node 1", "could not join the job: this node's flags differ"},
                  node0.all());
}

TEST(MultiNode, SlurmGivesNodesRanksAndTheMaster) {
  const std::string port = "--master_port=" + std::to_string(free_port());
  // The first node is named by its address (Slurm's NodeName may be any string): a host name such as
  // localhost would make the test depend on this machine's resolver (a root without /etc/hosts has none).
  auto node = [&](const std::string& id) {
    return std::map<std::string, std::string>{
        {"SLURM_NNODES", "2"}, {"SLURM_NODEID", id}, {"SLURM_JOB_NODELIST", "127.0.0.1,node[2-3]"}};
  };
  Launch node0(ddprun_worker({port, "--rdzv_conf=join_timeout=20"}, {"--print-env", "--allreduce"}), node("0"));
  Launch node1(ddprun_worker({port, "--rdzv_conf=join_timeout=20"}, {"--print-env", "--allreduce"}), node("1"));
  ASSERT_TRUE(Launch::wait_all({&node0, &node1}, 60s));
  ASSERT_EQ(node0.exit_code(), 0) << node0.all();
  ASSERT_EQ(node1.exit_code(), 0) << node1.all();
  expect_contains(node1.out(), {"[1]:sum=3 world=2 rank=1", "[1]:ENV GROUP_RANK=1", "[1]:ENV MASTER_ADDR=127.0.0.1"},
                  node1.all());
  expect_contains(node1.err(),
                  {"--nnodes=2 from SLURM_NNODES", "--node_rank=1 from SLURM_NODEID",
                   "--master_addr=127.0.0.1 from SLURM_JOB_NODELIST"},
                  node1.all());
}

TEST(MultiNode, AnElasticRangeStartsWithTheNodesThatCame) {
  const std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(free_port());
  const auto start = Clock::now();
  Launch only(ddprun_worker({"--nnodes=1:2", "--rdzv_backend=c10d", endpoint, "--rdzv_conf=last_call_timeout=1"},
                            {"--print-env"}));
  ASSERT_TRUE(only.wait(30s));
  EXPECT_EQ(only.exit_code(), 0) << only.all();
  EXPECT_GE(Clock::now() - start, 1s) << "it did not wait for a second node";
  expect_contains(only.out(), {"[0]:ENV WORLD_SIZE=1", "[0]:ENV GROUP_WORLD_SIZE=1"}, only.all());
}

}  // namespace
}  // namespace ddp::launcher::test
