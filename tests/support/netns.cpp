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

std::string make_namespace(const std::string& ns, bool& created) {
  auto [rc, out] = shell("ip netns add " + ns);
  created = rc == 0;
  if (rc != 0)
    return "cannot create a network namespace (ip netns add: " + out + "); this test needs root and the ip tool";
  // Entering one needs a mount namespace in which / can be made a slave mount: refused in a
  // chroot (/ is not a mount point) or an unprivileged container. Then nothing here can run.
  auto [enter_rc, enter_out] = shell("ip netns exec " + ns + " true");
  if (enter_rc != 0) {
    return "cannot enter a network namespace (ip netns exec: " + enter_out +
           "); this test needs root outside a chroot or restricted container";
  }
  return "";
}

TwoNodeNetwork::TwoNodeNetwork() {
  const std::string id = std::to_string(::getpid());
  a_ = "ddpA" + id;
  b_ = "ddpB" + id;
  veth_a_ = "dva" + id;
  veth_b_ = "dvb" + id;
  skip_reason_ = make_namespace(a_, created_a_);
  if (!skip_reason_.empty()) return;
  for (const std::string& step :
       {"ip netns add " + b_, "ip link add " + veth_a_ + " type veth peer name " + veth_b_,
        "ip link set " + veth_a_ + " netns " + a_, "ip link set " + veth_b_ + " netns " + b_,
        "ip -n " + a_ + " addr add 10.200.0.1/24 dev " + veth_a_,
        "ip -n " + b_ + " addr add 10.200.0.2/24 dev " + veth_b_, "ip -n " + a_ + " link set " + veth_a_ + " up",
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

NodeNetwork::NodeNetwork(int nodes) {
  static int made = 0;  // one process may make several, one after the other
  const std::string id = std::to_string(::getpid()) + "n" + std::to_string(made++);
  switch_ns_ = "ddpS" + id;
  created_.push_back(false);
  bool created = false;
  skip_reason_ = make_namespace(switch_ns_, created);
  created_[0] = created;
  if (!skip_reason_.empty()) return;
  std::vector<std::string> steps = {"ip -n " + switch_ns_ + " link add br0 type bridge",
                                    "ip -n " + switch_ns_ + " link set br0 up"};
  for (int n = 0; n < nodes; ++n) {
    nodes_.push_back("ddpN" + std::to_string(n) + "_" + id);
    links_.push_back("dn" + std::to_string(n) + "x" + std::to_string(::getpid()));  // at most 15 characters
    ports_.push_back("dp" + std::to_string(n) + "x" + std::to_string(::getpid()));
    const std::string& ns = nodes_.back();
    steps.insert(
        steps.end(),
        {"ip netns add " + ns, "ip link add " + links_.back() + " type veth peer name " + ports_.back(),
         "ip link set " + links_.back() + " netns " + ns, "ip link set " + ports_.back() + " netns " + switch_ns_,
         "ip -n " + switch_ns_ + " link set " + ports_.back() + " master br0",
         "ip -n " + switch_ns_ + " link set " + ports_.back() + " up",
         "ip -n " + ns + " addr add " + address(n) + "/24 dev " + links_.back(),
         "ip -n " + ns + " link set " + links_.back() + " up", "ip -n " + ns + " link set lo up"});
  }
  for (const std::string& step : steps) {
    auto [rc, out] = shell(step);
    if (step.rfind("ip netns add", 0) == 0) created_.push_back(rc == 0);
    if (rc != 0) {
      setup_error_ = step + ": " + out;
      return;
    }
  }
}

NodeNetwork::~NodeNetwork() {
  // Deleting a namespace takes the veth ends in it, and so the pairs, with it.
  for (std::size_t n = 1; n < created_.size(); ++n) {
    if (created_[n]) shell("ip netns del " + nodes_[n - 1]);
  }
  if (created_[0]) shell("ip netns del " + switch_ns_);
}

std::vector<std::string> NodeNetwork::on(int node, std::vector<std::string> argv) const {
  // A UTS namespace of its own, so that the node has its own host name.
  std::vector<std::string> full = {"ip",
                                   "netns",
                                   "exec",
                                   nodes_[static_cast<std::size_t>(node)],
                                   "unshare",
                                   "--uts",
                                   "sh",
                                   "-c",
                                   "hostname " + host_name(node) + " && exec \"$@\"",
                                   "sh"};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

bool NodeNetwork::set_link(int node, bool up) const {
  const auto n = static_cast<std::size_t>(node);
  const char* state = up ? " up" : " down";
  return shell("ip -n " + nodes_[n] + " link set " + links_[n] + state).first == 0 &&
         shell("ip -n " + switch_ns_ + " link set " + ports_[n] + state).first == 0;
}

}  // namespace ddp::test
