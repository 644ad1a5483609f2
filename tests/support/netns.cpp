#include "support/netns.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace ddp::test {

std::pair<int, std::string> shell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TwoNodeNetwork::TwoNodeNetwork() {
  const std::string id = std::to_string(::getpid());
  a_ = "ddpA" + id;
  b_ = "ddpB" + id;
  veth_a_ = "dva" + id;
  veth_b_ = "dvb" + id;
  auto [rc, out] = shell("ip netns add " + a_);
  if (rc != 0) {
    skip_reason_ = "cannot create a network namespace (ip netns add: " + out + "); this test needs root and the ip tool";
    return;
  }
  created_a_ = true;
  // Entering one needs a mount namespace in which / can be made a slave mount: refused in a
  // chroot (/ is not a mount point) or an unprivileged container. Then nothing here can run.
  auto [enter_rc, enter_out] = shell("ip netns exec " + a_ + " true");
  if (enter_rc != 0) {
    skip_reason_ = "cannot enter a network namespace (ip netns exec: " + enter_out +
                   "); this test needs root outside a chroot or restricted container";
    return;
  }
  for (const std::string& step : {"ip netns add " + b_, "ip link add " + veth_a_ + " type veth peer name " + veth_b_,
                                  "ip link set " + veth_a_ + " netns " + a_, "ip link set " + veth_b_ + " netns " + b_,
                                  "ip -n " + a_ + " addr add 10.200.0.1/24 dev " + veth_a_,
                                  "ip -n " + b_ + " addr add 10.200.0.2/24 dev " + veth_b_,
                                  "ip -n " + a_ + " link set " + veth_a_ + " up",
                                  "ip -n " + b_ + " link set " + veth_b_ + " up", "ip -n " + a_ + " link set lo up",
                                  "ip -n " + b_ + " link set lo up"}) {
    auto [step_rc, step_out] = shell(step);
    if (step.rfind("ip netns add", 0) == 0 && step_rc == 0) created_b_ = true;
    if (step_rc != 0) {
      setup_error_ = step + ": " + step_out;
      return;
    }
  }
}

TwoNodeNetwork::~TwoNodeNetwork() {
  if (created_a_) shell("ip netns del " + a_);  // takes the veth pair with it
  if (created_b_) shell("ip netns del " + b_);
}

bool TwoNodeNetwork::set_link(bool up) const {
  const char* state = up ? " up" : " down";
  return shell("ip -n " + a_ + " link set " + veth_a_ + state).first == 0 &&
         shell("ip -n " + b_ + " link set " + veth_b_ + state).first == 0;
}

std::vector<std::string> TwoNodeNetwork::in(const std::string& ns, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"ip", "netns", "exec", ns});
  return argv;
}

}  // namespace ddp::test
