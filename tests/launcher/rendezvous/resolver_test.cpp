// A machine where "localhost" does not resolve (a container without /etc/hosts): --standalone
// needs no resolver, and a store host that does not resolve is an error at once instead of
// workers retrying in silence until their timeout. The machine is simulated by a mount
// namespace in which /etc/hosts is empty (root and unshare; skipped with the reason elsewhere),
// or is this one when it has no /etc/hosts (a minimal root made with debootstrap).
#include <filesystem>

#include "e2e.h"
#include "support/netns.h"  // shell

namespace ddp::launcher::test {
namespace {

// False where there is no /etc/hosts to hide: the tests' precondition holds as the machine is
// (a bind mount would fail there: "mount point does not exist").
bool has_hosts_file() {
  std::error_code error;
  return std::filesystem::exists("/etc/hosts", error);
}

std::vector<std::string> without_hosts_file(const std::vector<std::string>& argv) {
  if (!has_hosts_file()) return argv;
  std::vector<std::string> wrapped = {
      "unshare", "--mount", "--propagation", "private", "sh", "-c", "mount --bind /dev/null /etc/hosts && exec \"$@\"",
      "sh"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

// Why the simulation cannot run here, or "".
std::string cannot_hide_hosts() {
  std::string command;
  for (const auto& word : without_hosts_file({"getent", "hosts", "localhost"})) command += "'" + word + "' ";
  auto [rc, out] = shell(command);
  if (rc == 2) return "";  // getent: not found
  if (rc == 0) return "localhost resolves here even without /etc/hosts (" + out + "): nothing to simulate";
  if (!has_hosts_file()) return "there is no /etc/hosts, but getent hosts localhost failed (" + out + ")";
  return "cannot hide /etc/hosts in a mount namespace (" + out + "); this test needs root and unshare";
}

#define REQUIRE_NO_RESOLVER() \
  if (auto why = cannot_hide_hosts(); !why.empty()) GTEST_SKIP() << why

TEST(Resolver, StandaloneNeedsNoResolver) {
  REQUIRE_NO_RESOLVER();
  Launch run(without_hosts_file(ddprun_worker({"--standalone", "--nproc_per_node=2"}, {"--allreduce", "--print-env"})));
  ASSERT_TRUE(run.wait(60s));
  EXPECT_EQ(run.exit_code(), 0) << run.all();
  expect_contains(run.out(), {"[0]:ENV MASTER_ADDR=127.0.0.1", "[0]:sum=3 world=2", "[1]:sum=3 world=2"}, run.all());
}

TEST(Resolver, AStoreHostThatDoesNotResolveIsAnErrorAtOnce) {
  REQUIRE_NO_RESOLVER();
  const auto start = std::chrono::steady_clock::now();
  Launch run(without_hosts_file(
      ddprun_worker({"--nproc_per_node=2", port_flag(), "--master_addr=localhost"}, {"--allreduce"})));
  ASSERT_TRUE(run.wait(60s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_EQ(run.exit_code(), 2) << run.all();
  expect_contains(run.err(),
                  {"--master_addr names the store's host \"localhost\", which does not resolve on this "
                   "machine",
                   "nothing was started"},
                  run.all());
  EXPECT_EQ(run.out().find("["), std::string::npos) << "a worker ran:\n" << run.all();
}

}  // namespace
}  // namespace ddp::launcher::test
