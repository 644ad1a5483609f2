// Which ranks of a group share a host, found at group creation: every rank publishes its host
// identity through the group's store, and every rank derives the same plan from the same records.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace ddp::detail::shm {

// What a rank publishes about itself.
struct Identity {
  bool enabled = true;  // its DDP_SHM allows shared memory
  pid_t pid = 0;
  std::string host;     // ranks with equal `host` can share memory
  std::string network;  // ranks with equal `network` reach each other over loopback (no spaces)

  bool operator==(const Identity&) const = default;
};

std::string encode(const Identity& id);
std::optional<Identity> decode_identity(const std::string& text);

// This process's host identity: hostname, boot id (/proc/sys/kernel/random/boot_id) and pid
// namespace, so that containers sharing a hostname but not memory or pids are kept apart.
std::string local_host_identity();
// This process's network identity: boot id and network namespace.
std::string local_network_identity();
// True when every rank's `network` is the same (and known): loopback connects them all.
bool one_network(const std::vector<Identity>& ids);

// How a group's ranks are placed. Pure: the same records give the same plan on every rank.
struct Plan {
  bool shm = false;                     // shared memory is used (every rank allows it, some host has two ranks)
  std::vector<std::vector<int>> hosts;  // group ranks per host, each ascending; hosts ordered by first rank
  int host = 0;                         // this rank's host
  int local = 0;                        // its index on that host (0: the host's leader)

  bool single_host() const { return hosts.size() == 1; }
  const std::vector<int>& my_host() const { return hosts[static_cast<std::size_t>(host)]; }
};

Plan make_plan(const std::vector<Identity>& ids, int rank);

// True when every host of the plan has the same number of ranks.
bool equal_hosts(const Plan& plan);

}  // namespace ddp::detail::shm
