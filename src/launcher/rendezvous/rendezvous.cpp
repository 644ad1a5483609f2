#include "rendezvous/rendezvous.h"

#include <thread>

#include "rendezvous/attempt_end.h"
#include "ddp/error.h"
#include "ddp/store.h"
#include "workers/signals.h"
#include "rendezvous/store_keys.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int Membership::world_size() const {
  int total = 0;
  for (const auto& node : nodes) total += node.nproc;
  return total;
}

int Membership::rank_offset() const {
  int offset = 0;
  for (int n = 0; n < node_rank; ++n) offset += nodes[static_cast<std::size_t>(n)].nproc;
  return offset;
}

std::string encode_node(const NodeInfo& node) { return cat(node.nproc, "\n", node.host, "\n", node.pid); }

NodeInfo decode_node(const std::string& text, int agent) {
  NodeInfo node;
  node.agent = agent;
  const auto first = text.find('\n');
  const auto second = text.find('\n', first + 1);
  if (first == std::string::npos || second == std::string::npos) {
    throw Error(cat("unreadable node record in the job's store: ", detail::quote(text)));
  }
  node.nproc = static_cast<int>(detail::parse_int(text.substr(0, first)).value_or(0));
  node.host = text.substr(first + 1, second - first - 1);
  node.pid = static_cast<long>(detail::parse_int(text.substr(second + 1)).value_or(0));
  if (node.nproc < 1) throw Error(cat("unreadable node record in the job's store: ", detail::quote(text)));
  return node;
}

std::string how_to_start(RdzvBackend backend) {
  return backend == RdzvBackend::Static
             ? "Start ddprun on every node with the same --nnodes, --master_addr, --master_port and --rdzv_id, "
               "and each with its own --node_rank."
             : "Start ddprun on every node with the same --nnodes, --rdzv_endpoint and --rdzv_id.";
}

void tell_the_others(Store& store, int agent, const std::string& host, long pid, const std::string& why) {
  try {
    AttemptEnd failed;
    failed.kind = AttemptEnd::Kind::AgentFailed;
    failed.node_rank = agent;
    failed.host = host;
    failed.agent_pid = pid;
    failed.what = cat("the ddprun of node ", agent, " (pid ", pid, " on ", host, ") could not join the job: ", why);
    store.compare_set(keys::attempt(0, "end"), "", encode(failed));
    store.add(keys::kLeft, 1);
  } catch (const Error&) {
  }
}

namespace {

void finish_rendezvous(Store& store, const RendezvousSettings& s, Membership& m, Clock::time_point deadline,
                       const std::function<void()>& check_interrupt);

}  // namespace

Membership rendezvous(Store& store, const RendezvousSettings& s, const std::function<void()>& check_interrupt) {
  const auto deadline = Clock::now() + s.join_timeout;
  const std::string me = cat("ddprun pid ", s.pid, " on ", s.host);
  Membership m;
  m.node_rank = m.agent = s.node_rank.value_or(0);
  const std::string owner = store.compare_set(keys::claim(m.node_rank), "", me);
  if (owner != me) {
    throw MismatchError(cat("node rank ", m.node_rank, " is already taken by ", owner, " in the job at ",
                            s.store_address,
                            ". Give each node its own --node_rank (0 to nnodes-1), or give this "
                            "job its own --rdzv_id and port."));
  }
  // From here on the other nodes count on this one: if it cannot go on, it tells them (through
  // the first attempt's end record) instead of leaving them waiting for their join timeout.
  const std::string first_end = keys::attempt(0, "end");
  auto check = [&] {
    if (check_interrupt) check_interrupt();
    if (store.check({first_end})) {
      throw Error(cat("the job could not start: ", decode_attempt_end(store.get(first_end)).what));
    }
  };
  try {
    finish_rendezvous(store, s, m, deadline, check);
  } catch (const Error& e) {
    tell_the_others(store, m.agent, s.host, s.pid, e.what());
    throw;
  } catch (const Interrupted& i) {
    tell_the_others(store, m.agent, s.host, s.pid, cat("it received ", signal_name(i.signal), " while joining"));
    throw;
  }
  return m;
}

namespace {

void finish_rendezvous(Store& store, const RendezvousSettings& s, Membership& m, Clock::time_point deadline,
                       const std::function<void()>& check_interrupt) {
  store.set(keys::node(m.node_rank), encode_node({s.nproc, s.host, s.pid, m.agent}));
  if (s.coordinator) {
    store.set(keys::kConfig, s.agreed);
    store.set(keys::kNnodes, std::to_string(s.max_nodes));
  }
  if (!wait_for_keys(store, {keys::kNnodes}, deadline, check_interrupt)) {
    throw TimeoutError(cat("the job at ", s.store_address, " did not start within ",
                           detail::format_duration(s.join_timeout),
                           ": its first node never decided the node count "
                           "(node 0 is missing). ",
                           how_to_start(s.backend)));
  }
  m.nnodes = static_cast<int>(detail::parse_int(store.get(keys::kNnodes)).value_or(0));
  const std::string agreed = store.get(keys::kConfig);
  if (agreed != s.agreed) {
    throw MismatchError(cat("this node's flags differ from the first node's: here ", detail::quote(s.agreed, 200),
                            ", there ", detail::quote(agreed, 200), ". ", how_to_start(s.backend)));
  }
  std::vector<std::string> node_keys;
  for (int n = 0; n < m.nnodes; ++n) node_keys.push_back(keys::node(n));
  if (!wait_for_keys(store, node_keys, deadline, check_interrupt)) {
    std::vector<int> missing;
    for (int n = 0; n < m.nnodes; ++n) {
      if (!store.check({keys::node(n)})) missing.push_back(n);
    }
    throw TimeoutError(cat("node rank", missing.size() == 1 ? " " : "s ", detail::join(missing),
                           " did not join the job at ", s.store_address, " within ",
                           detail::format_duration(s.join_timeout), " (", m.nnodes - static_cast<int>(missing.size()),
                           " of ", m.nnodes, " nodes are here). ", how_to_start(s.backend),
                           " (--rdzv_conf join_timeout=SECONDS waits longer.)"));
  }
  const auto nodes = store.multi_get(node_keys);
  for (int n = 0; n < m.nnodes; ++n) m.nodes.push_back(decode_node(nodes[static_cast<std::size_t>(n)], n));
}

}  // namespace

}  // namespace ddp::launcher
