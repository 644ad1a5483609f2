#include "attempt_end.h"

#include <map>

#include "ddp/error.h"
#include "record_text.h"
#include "ddp/detail/strings.h"

namespace ddp::launcher {

using detail::cat;

namespace {

const char* kind_name(AttemptEnd::Kind kind) {
  switch (kind) {
    case AttemptEnd::Kind::Succeeded: return "succeeded";
    case AttemptEnd::Kind::WorkerFailed: return "worker_failed";
    case AttemptEnd::Kind::Interrupted: return "interrupted";
    case AttemptEnd::Kind::AgentLost: return "agent_lost";
    case AttemptEnd::Kind::AgentFailed: return "agent_failed";
    case AttemptEnd::Kind::StoreLost: return "store_lost";
    case AttemptEnd::Kind::WorkerStopped: return "worker_stopped";
    case AttemptEnd::Kind::NodeWaiting: return "node_waiting";
  }
  return "?";
}

}  // namespace

std::string encode(const AttemptEnd& end) {
  std::string out = "ddprun-attempt-end 1\n";
  auto field = [&](const char* key, const auto& value) { out += cat(key, "=", value, "\n"); };
  field("kind", kind_name(end.kind));
  field("signal", end.signal);
  field("node_rank", end.node_rank);
  field("host", escape_field(end.host));
  field("agent_pid", end.agent_pid);
  field("what", escape_field(end.what));
  field("lost_agent", end.lost_agent);
  field("lost_why", escape_field(end.lost_why));
  field("time_ms", to_millis(end.time));
  if (end.names_worker()) {
    const WorkerExit& w = end.worker;
    field("w.rank", w.rank);
    field("w.local_rank", w.local_rank);
    field("w.node_rank", w.node_rank);
    field("w.host", escape_field(w.host));
    field("w.pid", w.pid);
    field("w.exit_code", w.exit_code);
    field("w.signal", w.signal);
    field("w.stopped", w.stopped ? 1 : 0);
    field("w.time_ms", to_millis(w.time));
    field("w.log_file", escape_field(w.log_file));
    field("w.suspended", escape_field(w.suspended));
    for (const auto& line : w.last_lines) field("w.line", escape_field(line));
    if (const auto& b = end.blame) {
      field("b.rank", b->rank);
      field("b.local_rank", b->local_rank);
      field("b.node_rank", b->node_rank);
      field("b.host", escape_field(b->host));
      field("b.pid", b->pid);
      field("b.evidence", escape_field(b->evidence));
    }
  }
  return out;
}

AttemptEnd decode_attempt_end(const std::string& text) {
  auto bad = [&](const std::string& why) -> Error {
    return Error(cat("unreadable attempt record in the job's store (", why, "): ", detail::quote(text, 120),
                     ". Are two different ddprun versions in one job?"));
  };
  const std::string header = "ddprun-attempt-end 1\n";
  if (text.compare(0, header.size(), header) != 0) throw bad("no header");
  std::map<std::string, std::string> fields;
  AttemptEnd end;
  std::size_t pos = header.size();
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view line(text.data() + pos, eol - pos);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) throw bad("a line without '='");
    const std::string key(line.substr(0, eq));
    std::string value = unescape_field(line.substr(eq + 1));
    if (key == "w.line") {
      end.worker.last_lines.push_back(std::move(value));
    } else {
      fields[key] = std::move(value);
    }
    pos = eol + 1;
  }
  auto number = [&](const char* key, std::int64_t fallback) -> std::int64_t {
    auto it = fields.find(key);
    if (it == fields.end()) return fallback;
    auto value = detail::parse_int(it->second);
    if (!value) throw bad(cat(key, " is not a number"));
    return *value;
  };
  auto string = [&](const char* key) { return fields.count(key) ? fields[key] : std::string(); };
  const std::string kind = string("kind");
  bool known = false;
  for (auto k : {AttemptEnd::Kind::Succeeded, AttemptEnd::Kind::WorkerFailed, AttemptEnd::Kind::Interrupted,
                 AttemptEnd::Kind::AgentLost, AttemptEnd::Kind::AgentFailed, AttemptEnd::Kind::StoreLost,
                 AttemptEnd::Kind::WorkerStopped, AttemptEnd::Kind::NodeWaiting}) {
    if (kind == kind_name(k)) {
      end.kind = k;
      known = true;
    }
  }
  if (!known) throw bad(cat("unknown kind ", detail::quote(kind)));
  end.signal = static_cast<int>(number("signal", 0));
  end.node_rank = static_cast<int>(number("node_rank", 0));
  end.host = string("host");
  end.agent_pid = number("agent_pid", 0);
  end.what = string("what");
  end.lost_agent = static_cast<int>(number("lost_agent", -1));
  end.lost_why = string("lost_why");
  end.time = from_millis(number("time_ms", 0));
  if (end.names_worker()) {
    WorkerExit& w = end.worker;
    w.rank = static_cast<int>(number("w.rank", -1));
    w.local_rank = static_cast<int>(number("w.local_rank", -1));
    w.node_rank = static_cast<int>(number("w.node_rank", 0));
    w.host = string("w.host");
    w.pid = number("w.pid", 0);
    w.exit_code = static_cast<int>(number("w.exit_code", -1));
    w.signal = static_cast<int>(number("w.signal", 0));
    w.stopped = number("w.stopped", 0) != 0;
    w.time = from_millis(number("w.time_ms", 0));
    w.log_file = string("w.log_file");
    w.suspended = string("w.suspended");
    if (fields.count("b.rank")) {
      Blame b;
      b.rank = static_cast<int>(number("b.rank", -1));
      b.local_rank = static_cast<int>(number("b.local_rank", -1));
      b.node_rank = static_cast<int>(number("b.node_rank", 0));
      b.host = string("b.host");
      b.pid = number("b.pid", 0);
      b.evidence = string("b.evidence");
      end.blame = std::move(b);
    }
  }
  return end;
}

}  // namespace ddp::launcher
