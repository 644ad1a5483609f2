#include "rendezvous/round_record.h"

#include <map>

#include "ddp/error.h"
#include "rendezvous/record_text.h"
#include "util/strings.h"
#include "workers/worker_exit.h"

namespace ddp::launcher {

using detail::cat;

int RoundRecord::world_size() const {
  int total = 0;
  for (const auto& node : nodes) total += node.nproc;
  return total;
}

int RoundRecord::node_rank_of(int agent) const {
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].agent == agent) return static_cast<int>(n);
  }
  return -1;
}

namespace {

const std::string kHeader = "ddprun-round 1\n";

}  // namespace

// One item per line: "round=", "formed=", "restarts=", "failure=", then "node=AGENT NPROC PID HOST"
// and "change=KIND AGENT NODE PID MILLIS NNODES WORKERS HOST\tWHY".
std::string encode(const RoundRecord& r) {
  std::string out = kHeader;
  out += cat("round=", r.round, "\nformed=", r.formed ? 1 : 0, "\nrestarts=", r.restarts_used,
             "\nfailure=", escape_field(r.failure), "\n");
  for (const auto& n : r.nodes) out += cat("node=", n.agent, " ", n.nproc, " ", n.pid, " ", escape_field(n.host), "\n");
  for (const auto& c : r.changes) {
    out += cat("change=", c.kind == MembershipChange::Kind::Lost ? "lost" : "joined", " ", c.agent, " ", c.node_rank,
               " ", c.pid, " ", to_millis(c.time), " ", c.nnodes, " ", c.workers, " ", escape_field(c.host), "\t",
               escape_field(c.why), "\n");
  }
  return out;
}

namespace {

using Bad = std::function<Error(const std::string&)>;

std::int64_t number(std::string_view field, const char* what, const Bad& bad) {
  auto value = detail::parse_int(field);
  if (!value) throw bad(cat(what, " is not a number"));
  return *value;
}

// The next space-separated word of `rest`, removed from it.
std::string_view word(std::string_view& rest, const char* what, const Bad& bad) {
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) throw bad(cat("a ", what, " line is cut short"));
  const auto w = rest.substr(0, space);
  rest.remove_prefix(space + 1);
  return w;
}

NodeInfo decode_node_line(std::string_view value, const Bad& bad) {
  NodeInfo n;
  n.agent = static_cast<int>(number(word(value, "node", bad), "an agent", bad));
  n.nproc = static_cast<int>(number(word(value, "node", bad), "a worker count", bad));
  n.pid = static_cast<long>(number(word(value, "node", bad), "a pid", bad));
  n.host = unescape_field(value);
  if (n.nproc < 1) throw bad("a node without workers");
  return n;
}

MembershipChange decode_change(std::string_view value, const Bad& bad) {
  MembershipChange c;
  const auto kind = word(value, "change", bad);
  if (kind != "lost" && kind != "joined") throw bad(cat("unknown change ", detail::quote(std::string(kind))));
  c.kind = kind == "lost" ? MembershipChange::Kind::Lost : MembershipChange::Kind::Joined;
  c.agent = static_cast<int>(number(word(value, "change", bad), "an agent", bad));
  c.node_rank = static_cast<int>(number(word(value, "change", bad), "a node rank", bad));
  c.pid = static_cast<long>(number(word(value, "change", bad), "a pid", bad));
  c.time = from_millis(number(word(value, "change", bad), "a time", bad));
  c.nnodes = static_cast<int>(number(word(value, "change", bad), "a node count", bad));
  c.workers = static_cast<int>(number(word(value, "change", bad), "a worker count", bad));
  const auto tab = value.find('\t');
  if (tab == std::string_view::npos) throw bad("a change without its reason");
  c.host = unescape_field(value.substr(0, tab));
  c.why = unescape_field(value.substr(tab + 1));
  return c;
}

}  // namespace

RoundRecord decode_round_record(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error(cat("unreadable round record in the job's store (", why, "): ", detail::quote(text, 120),
                     ". Are two different ddprun versions in one job?"));
  };
  if (text.compare(0, kHeader.size(), kHeader) != 0) throw bad("no header");
  RoundRecord r;
  for_each_field(text, kHeader.size(), bad, [&](std::string_view key, std::string_view value) {
    if (key == "round") {
      r.round = static_cast<int>(number(value, "round", bad));
    } else if (key == "formed") {
      r.formed = number(value, "formed", bad) != 0;
    } else if (key == "restarts") {
      r.restarts_used = static_cast<int>(number(value, "restarts", bad));
    } else if (key == "failure") {
      r.failure = unescape_field(value);
    } else if (key == "node") {
      r.nodes.push_back(decode_node_line(value, bad));
    } else if (key == "change") {
      r.changes.push_back(decode_change(value, bad));
    } else {
      throw bad(cat("unknown field ", detail::quote(std::string(key))));
    }
  });
  return r;
}

std::string describe(const MembershipChange& c) {
  const std::string node = cat("node ", c.node_rank, " (host ", c.host, ", pid ", c.pid, ")");
  const std::string after = cat("continuing with ", c.nnodes, " node", c.nnodes == 1 ? "" : "s", ", ", c.workers,
                                " worker", c.workers == 1 ? "" : "s");
  if (c.kind == MembershipChange::Kind::Joined) return cat(node, " joined; ", after);
  if (c.nnodes == 0) return cat(node, " lost: ", c.why);  // a round that could not form
  return cat(node, " lost: ", c.why, "; ", after);
}

std::string history_line(const MembershipChange& c) { return cat(format_time(c.time), "  ", describe(c)); }

}  // namespace ddp::launcher
