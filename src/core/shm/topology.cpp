#include "shm/topology.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "util/strings.h"

namespace ddp::detail::shm {

// "enabled pid network host": the host (last) may hold spaces, the network ("-" when unknown) does not.
std::string encode(const Identity& id) {
  return cat(id.enabled ? 1 : 0, " ", id.pid, " ", id.network.empty() ? "-" : id.network, " ", id.host);
}

std::optional<Identity> decode_identity(const std::string& text) {
  const auto first = text.find(' ');
  const auto second = first == std::string::npos ? first : text.find(' ', first + 1);
  const auto third = second == std::string::npos ? second : text.find(' ', second + 1);
  if (third == std::string::npos) return std::nullopt;
  auto enabled = parse_int(std::string_view(text).substr(0, first));
  auto pid = parse_int(std::string_view(text).substr(first + 1, second - first - 1));
  if (!enabled || !pid || (*enabled != 0 && *enabled != 1) || *pid <= 0) return std::nullopt;
  std::string network = text.substr(second + 1, third - second - 1);
  if (network == "-") network.clear();
  return Identity{*enabled == 1, static_cast<pid_t>(*pid), text.substr(third + 1), std::move(network)};
}

std::string local_host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  const bool have_ns = ::stat("/proc/self/ns/pid", &ns) == 0;
  return cat(name, "/", boot, "/pidns:", have_ns ? std::to_string(ns.st_ino) : std::string("?"));
}

std::string local_network_identity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  if (boot.empty() || ::stat("/proc/self/ns/net", &ns) != 0) return {};
  return cat(boot, "/netns:", ns.st_ino);
}

bool one_network(const std::vector<Identity>& ids) {
  for (const auto& id : ids) {
    if (id.network.empty() || id.network != ids.front().network) return false;
  }
  return !ids.empty();
}

Plan make_plan(const std::vector<Identity>& ids, int rank) {
  Plan plan;
  std::map<std::string, int> index;
  bool enabled = true;
  for (int r = 0; r < static_cast<int>(ids.size()); ++r) {
    const auto& id = ids[static_cast<std::size_t>(r)];
    enabled = enabled && id.enabled;
    auto [it, added] = index.emplace(id.host, static_cast<int>(plan.hosts.size()));
    if (added) plan.hosts.emplace_back();
    plan.hosts[static_cast<std::size_t>(it->second)].push_back(r);
    if (r == rank) {
      plan.host = it->second;
      plan.local = static_cast<int>(plan.hosts[static_cast<std::size_t>(it->second)].size()) - 1;
    }
  }
  bool shared = false;
  for (const auto& h : plan.hosts) shared = shared || h.size() > 1;
  plan.shm = enabled && shared;
  return plan;
}

bool equal_hosts(const Plan& plan) {
  return std::all_of(plan.hosts.begin(), plan.hosts.end(),
                     [&](const std::vector<int>& h) { return h.size() == plan.hosts.front().size(); });
}

}  // namespace ddp::detail::shm
