// Two "hosts" on one machine for tests: network namespaces A (10.200.0.1) and B (10.200.0.2)
// joined by a veth pair. Needs root and the ip tool, and a machine where namespaces can be made
// and entered (not a chroot, not an unprivileged container); where they cannot, tests skip with
// the reason.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddp::test {

// Runs a shell command; returns its exit status and output.
std::pair<int, std::string> shell(const std::string& command);

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

#define REQUIRE_NETWORK(net)                                             \
  if (!(net).skip_reason().empty()) GTEST_SKIP() << (net).skip_reason(); \
  ASSERT_TRUE((net).setup_error().empty()) << (net).setup_error()

}  // namespace ddp::test
