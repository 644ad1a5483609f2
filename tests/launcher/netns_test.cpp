// Two "nodes" with their own addresses: two network namespaces joined by a veth pair, one ddprun
// in each. Needs root (ip netns add); skipped with the reason where it cannot run.
#include <unistd.h>

#include <cstdio>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

// Runs a shell command; returns its exit status and output.
std::pair<int, std::string> shell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// Two namespaces, A (10.200.0.1) and B (10.200.0.2), joined by a veth pair; deleted (with the
// pair) on destruction, whatever happened.
class TwoNodeNetwork {
 public:
  TwoNodeNetwork() {
    const std::string id = std::to_string(::getpid());
    a_ = "ddprunA" + id;
    b_ = "ddprunB" + id;
    const std::string veth_a = "dva" + id, veth_b = "dvb" + id;
    auto [rc, out] = shell("ip netns add " + a_);
    if (rc != 0) {
      skip_reason_ = "cannot create a network namespace (ip netns add: " + out +
                     "); this test needs root and the ip tool";
      return;
    }
    created_a_ = true;
    for (const std::string& step : {"ip netns add " + b_, "ip link add " + veth_a + " type veth peer name " + veth_b,
                                    "ip link set " + veth_a + " netns " + a_, "ip link set " + veth_b + " netns " + b_,
                                    "ip -n " + a_ + " addr add 10.200.0.1/24 dev " + veth_a,
                                    "ip -n " + b_ + " addr add 10.200.0.2/24 dev " + veth_b,
                                    "ip -n " + a_ + " link set " + veth_a + " up",
                                    "ip -n " + b_ + " link set " + veth_b + " up", "ip -n " + a_ + " link set lo up",
                                    "ip -n " + b_ + " link set lo up"}) {
      auto [step_rc, step_out] = shell(step);
      if (step.rfind("ip netns add", 0) == 0 && step_rc == 0) created_b_ = true;
      if (step_rc != 0) {
        setup_error_ = step + ": " + step_out;
        return;
      }
    }
  }
  ~TwoNodeNetwork() {
    if (created_a_) shell("ip netns del " + a_);  // takes the veth pair with it
    if (created_b_) shell("ip netns del " + b_);
  }

  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& setup_error() const { return setup_error_; }
  std::vector<std::string> in_a(std::vector<std::string> argv) const { return in(a_, std::move(argv)); }
  std::vector<std::string> in_b(std::vector<std::string> argv) const { return in(b_, std::move(argv)); }

 private:
  static std::vector<std::string> in(const std::string& ns, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns});
    return argv;
  }
  std::string a_, b_, skip_reason_, setup_error_;
  bool created_a_ = false, created_b_ = false;
};

#define REQUIRE_NETWORK(net)                                          \
  if (!(net).skip_reason().empty()) GTEST_SKIP() << (net).skip_reason(); \
  ASSERT_TRUE((net).setup_error().empty()) << (net).setup_error()

void expect_one_job(Launch& a, Launch& b) {
  ASSERT_TRUE(Launch::wait_all({&a, &b}, 60s));
  ASSERT_EQ(a.exit_code(), 0) << a.all();
  ASSERT_EQ(b.exit_code(), 0) << b.all();
  expect_contains(a.out(), {"[0]:sum=10 world=4 rank=0", "[1]:sum=10 world=4 rank=1"}, a.all());
  expect_contains(b.out(), {"[2]:sum=10 world=4 rank=2", "[3]:sum=10 world=4 rank=3", "[2]:ENV MASTER_ADDR=10.200.0.1",
                            "[3]:ENV GROUP_RANK=1"},
                  b.all());
}

TEST(NetworkNamespaces, TwoStaticNodesWithTheirOwnAddresses) {
  TwoNodeNetwork net;
  REQUIRE_NETWORK(net);
  const std::vector<std::string> flags = {"--nnodes=2", "--nproc_per_node=2", "--master_addr=10.200.0.1",
                                          "--master_port=29500", "--rdzv_conf=join_timeout=20"};
  auto node = [&](const std::string& rank) {
    auto f = flags;
    f.push_back("--node_rank=" + rank);
    return ddprun_worker(f, {"--allreduce", "--print-env"});
  };
  Launch b(net.in_b(node("1")));
  Launch a(net.in_a(node("0")));
  expect_one_job(a, b);
}

TEST(NetworkNamespaces, TwoC10dNodesFindTheHostByItsAddress) {
  TwoNodeNetwork net;
  REQUIRE_NETWORK(net);
  // Both are given the same endpoint; only the ddprun whose machine owns 10.200.0.1 hosts it.
  const std::vector<std::string> flags = {"--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                                          "--rdzv_endpoint=10.200.0.1:29400", "--rdzv_conf=join_timeout=20"};
  Launch a(net.in_a(ddprun_worker(flags, {"--allreduce", "--print-env"})));
  ASSERT_TRUE(a.wait_for("hosting job")) << a.all();
  Launch b(net.in_b(ddprun_worker(flags, {"--allreduce", "--print-env"})));
  expect_one_job(a, b);
  expect_contains(b.err(), {"joining job"}, b.all());
}

}  // namespace
}  // namespace ddp::launcher::test
