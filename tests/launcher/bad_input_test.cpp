// Bad input: a clear message, exit status 2, and nothing started.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

void expect_refused(const std::vector<std::string>& argv, const std::vector<std::string>& fragments) {
  Launch run(argv);
  ASSERT_TRUE(run.wait(30s));
  EXPECT_EQ(run.exit_code(), 2) << run.all();
  expect_contains(run.err(), fragments, run.all());
  expect_contains(run.err(), {"ddprun: error: ", "nothing was started"}, run.all());
  EXPECT_EQ(run.out().find("["), std::string::npos) << "a worker ran:\n" << run.all();
}

TEST(BadInput, UnknownFlag) {
  expect_refused({kDdprun, "--nproc_per_nodes=2", kWorker}, {"unknown flag \"--nproc_per_nodes\"", "ddprun --help"});
}

TEST(BadInput, NonNumericCount) {
  expect_refused({kDdprun, "--nproc_per_node=many", kWorker}, {"--nproc_per_node \"many\" is not valid"});
  expect_refused({kDdprun, "--nnodes=x", kWorker}, {"--nnodes \"x\" is not valid"});
}

TEST(BadInput, NodeRankNotBelowNnodes) {
  expect_refused({kDdprun, "--nnodes=2", "--node_rank=2", kWorker}, {"--node_rank=2 is not less than --nnodes=2"});
}

TEST(BadInput, MissingProgram) {
  expect_refused({kDdprun, "--nproc_per_node=2", "./no/such/train"}, {"\"./no/such/train\" does not exist"});
  expect_refused({kDdprun, "--nproc_per_node=2"}, {"no program to run"});
}

TEST(BadInput, ProgramNotExecutable) {
  TempDir dir;
  write_file(dir.file("train"), "not a program");
  expect_refused({kDdprun, dir.file("train")}, {"is not executable", "chmod +x"});
}

TEST(BadInput, PortInUse) {
  // Hold a port with a listening socket on every address, as a second job's store would.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  TempDir dir;
  expect_refused(
      ddprun_worker({"--nproc_per_node=2", "--master_port=" + std::to_string(port)}, {"--pid-dir", dir.path()}),
      {"cannot host the job's store on port " + std::to_string(port), "--master_port", "--standalone"});
  EXPECT_EQ(read_file(dir.file("worker_0")), "") << "a worker was started";
  ::close(fd);
}

TEST(BadInput, AStoreHostThatDoesNotResolve) {
  // At once, rather than workers retrying silently until their timeout (.invalid never resolves).
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  expect_refused(
      ddprun_worker({"--nproc_per_node=2", port_flag(), "--master_addr=no-such-host.invalid"},
                    {"--pid-dir", dir.path()}),
      {"--master_addr names the store's host \"no-such-host.invalid\", which does not resolve on this machine",
       "Give an IP address"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_EQ(read_file(dir.file("worker_0")), "") << "a worker was started";
  expect_refused(ddprun_worker({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=no-such-host.invalid:29400"}, {}),
                 {"--rdzv_endpoint names the store's host \"no-such-host.invalid\""});
}

TEST(BadInput, GpuWithoutGpus) { expect_refused({kDdprun, "--nproc_per_node=gpu", kWorker}, {"no visible GPU"}); }

}  // namespace
}  // namespace ddp::launcher::test
