// Two "nodes" with their own addresses: two network namespaces joined by a veth pair, one ddprun
// in each. Needs root (ip netns add); skipped with the reason where it cannot run.
#include <limits.h>
#include <unistd.h>

#include "e2e.h"
#include "support/netns.h"

namespace ddp::launcher::test {
namespace {

void expect_one_job(Launch& a, Launch& b) {
  ASSERT_TRUE(Launch::wait_all({&a, &b}, 60s));
  ASSERT_EQ(a.exit_code(), 0) << a.all();
  ASSERT_EQ(b.exit_code(), 0) << b.all();
  expect_contains(a.out(), {"[0]:sum=10 world=4 rank=0", "[1]:sum=10 world=4 rank=1"}, a.all());
  expect_contains(b.out(),
                  {"[2]:sum=10 world=4 rank=2", "[3]:sum=10 world=4 rank=3", "[2]:ENV MASTER_ADDR=10.200.0.1",
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

TEST(NetworkNamespaces, TheySkipWithTheReasonWhereTheyCannotBeEntered) {
  // A real chroot, where "/" is not a mount point: `ip netns add` works, but `ip netns exec`
  // cannot make "/" a slave mount. A test of this file run inside it must skip, saying why.
  if (std::getenv("DDP_TEST_IN_CHROOT")) GTEST_SKIP() << "this is the run inside the chroot";
  char exe[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  const std::string self = exe;
  const std::string top = self.substr(0, self.find('/', 1));  // "/work" of /work/.../ddprun_tests
  TempDir root;
  const std::string script = "set -e; R=" + root.path() + "; for d in /usr /etc /run /dev /proc /sys /tmp " + top +
                             "; do mkdir -p $R$d; mount --rbind $d $R$d; done; "
                             "for l in bin lib lib64 sbin; do if [ -L /$l ]; then ln -s $(readlink /$l) $R/$l; "
                             "elif [ -d /$l ]; then mkdir -p $R/$l; mount --rbind /$l $R/$l; fi; done; "
                             "echo chroot ready; exec chroot $R env DDP_TEST_IN_CHROOT=1 " +
                             self + " --gtest_filter=NetworkNamespaces.TwoStaticNodesWithTheirOwnAddresses";
  Launch run({"unshare", "--mount", "--propagation", "private", "sh", "-c", script});
  ASSERT_TRUE(run.wait(60s));
  if (run.out().find("chroot ready") == std::string::npos) {
    GTEST_SKIP() << "cannot make a chroot here (it needs root and unshare): " << run.all();
  }
  EXPECT_EQ(run.exit_code(), 0) << "the test failed instead of skipping:\n" << run.all();
  expect_contains(run.out(),
                  {"[  SKIPPED ] NetworkNamespaces.TwoStaticNodesWithTheirOwnAddresses",
                   "cannot enter a network namespace (ip netns exec: ", "mount --make-rslave"},
                  run.all());
}

}  // namespace
}  // namespace ddp::launcher::test
