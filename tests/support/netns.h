// "Hosts" on one machine for tests. Two: network namespaces A (10.200.0.1) and B (10.200.0.2)
// joined by a veth pair; N: NodeNetwork below. Needs root and the ip tool, and a machine where namespaces can be made
// and entered (not a chroot, not an unprivileged container); where they cannot, tests skip with
// the reason.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddp::test {

// Runs a shell command; returns its exit status and output.
std::pair<int, std::string> shell(const std::string& command);

// Makes network namespace `ns` and checks that it can be entered. Returns why a test must skip
// (empty: it can run); `created` says whether `ns` exists now (to delete it).
std::string make_namespace(const std::string& ns, bool& created);

// The namespaces and the veth pair; deleted (with the pair) on destruction, whatever happened.
class TwoNodeNetwork {
 public:
  TwoNodeNetwork();
  ~TwoNodeNetwork();
  TwoNodeNetwork(const TwoNodeNetwork&) = delete;
  TwoNodeNetwork& operator=(const TwoNodeNetwork&) = delete;

  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& setup_error() const { return setup_error_; }
  // argv run inside namespace A or B.
  std::vector<std::string> in_a(std::vector<std::string> argv) const { return in(a_, std::move(argv)); }
  std::vector<std::string> in_b(std::vector<std::string> argv) const { return in(b_, std::move(argv)); }
  // Takes the link between the two down (a network fault) or back up.
  bool set_link(bool up) const;

 private:
  static std::vector<std::string> in(const std::string& ns, std::vector<std::string> argv);
  std::string a_, b_, veth_a_, veth_b_, skip_reason_, setup_error_;
  bool created_a_ = false, created_b_ = false;
};

// N "hosts" on one machine: network namespaces node 0..N-1 at 10.201.0.1, .2, ..., each joined
// by a veth pair to a bridge in a namespace of its own (a switch), and each program run in one
// with a host name of its own (nodeA, nodeB, ...: a UTS namespace). Deleted on destruction.
class NodeNetwork {
 public:
  explicit NodeNetwork(int nodes);
  ~NodeNetwork();
  NodeNetwork(const NodeNetwork&) = delete;
  NodeNetwork& operator=(const NodeNetwork&) = delete;

  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& setup_error() const { return setup_error_; }
  static std::string address(int node) { return "10.201.0." + std::to_string(node + 1); }
  static std::string host_name(int node) { return std::string("node") + static_cast<char>('A' + node); }
  // argv run on node `node`, its host name host_name(node).
  std::vector<std::string> on(int node, std::vector<std::string> argv) const;
  // Takes node `node`'s link down (cut off from every other node) or back up.
  bool set_link(int node, bool up) const;

 private:
  std::string switch_ns_;
  std::vector<std::string> nodes_;  // namespace names
  std::vector<std::string> links_;  // each node's end of its veth pair (in the node's namespace)
  std::vector<std::string> ports_;  // the bridge's end (in the switch's)
  std::vector<bool> created_;       // switch first, then the nodes
  std::string skip_reason_, setup_error_;
};

#define REQUIRE_NETWORK(net)                                             \
  if (!(net).skip_reason().empty()) GTEST_SKIP() << (net).skip_reason(); \
  ASSERT_TRUE((net).setup_error().empty()) << (net).setup_error()

}  // namespace ddp::test
