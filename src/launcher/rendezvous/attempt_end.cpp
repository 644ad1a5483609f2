#include "rendezvous/attempt_end.h"

#include <functional>
#include <map>

#include "ddp/error.h"
#include "rendezvous/record_text.h"
#include "util/strings.h"

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

namespace {

// An attempt record's fields, read by name.
struct Fields {
  std::map<std::string, std::string> values;
  std::function<Error(const std::string&)> bad;

  std::int64_t number(const char* key, std::int64_t fallback) const {
    auto it = values.find(key);
    if (it == values.end()) return fallback;
    auto value = detail::parse_int(it->second);
    if (!value) throw bad(cat(key, " is not a number"));
    return *value;
  }
  std::string string(const char* key) const {
    auto it = values.find(key);
    return it == values.end() ? std::string() : it->second;
  }
};

AttemptEnd::Kind decode_kind(const Fields& f) {
  const std::string kind = f.string("kind");
  for (auto k : {AttemptEnd::Kind::Succeeded, AttemptEnd::Kind::WorkerFailed, AttemptEnd::Kind::Interrupted,
                 AttemptEnd::Kind::AgentLost, AttemptEnd::Kind::AgentFailed, AttemptEnd::Kind::StoreLost,
                 AttemptEnd::Kind::WorkerStopped, AttemptEnd::Kind::NodeWaiting}) {
    if (kind == kind_name(k)) return k;
  }
  throw f.bad(cat("unknown kind ", detail::quote(kind)));
}

// The worker the attempt names (its last lines are read beside the fields).
void decode_worker(const Fields& f, WorkerExit& w) {
  w.rank = static_cast<int>(f.number("w.rank", -1));
  w.local_rank = static_cast<int>(f.number("w.local_rank", -1));
  w.node_rank = static_cast<int>(f.number("w.node_rank", 0));
  w.host = f.string("w.host");
  w.pid = f.number("w.pid", 0);
  w.exit_code = static_cast<int>(f.number("w.exit_code", -1));
  w.signal = static_cast<int>(f.number("w.signal", 0));
  w.stopped = f.number("w.stopped", 0) != 0;
  w.time = from_millis(f.number("w.time_ms", 0));
  w.log_file = f.string("w.log_file");
  w.suspended = f.string("w.suspended");
}

Blame decode_blame(const Fields& f) {
  Blame b;
  b.rank = static_cast<int>(f.number("b.rank", -1));
  b.local_rank = static_cast<int>(f.number("b.local_rank", -1));
  b.node_rank = static_cast<int>(f.number("b.node_rank", 0));
  b.host = f.string("b.host");
  b.pid = f.number("b.pid", 0);
  b.evidence = f.string("b.evidence");
  return b;
}

}  // namespace

AttemptEnd decode_attempt_end(const std::string& text) {
  Fields f;
  f.bad = [&](const std::string& why) -> Error {
    return Error(cat("unreadable attempt record in the job's store (", why, "): ", detail::quote(text, 120),
                     ". Are two different ddprun versions in one job?"));
  };
  const std::string header = "ddprun-attempt-end 1\n";
  if (text.compare(0, header.size(), header) != 0) throw f.bad("no header");
  AttemptEnd end;
  for_each_field(text, header.size(), f.bad, [&](std::string_view key, std::string_view value) {
    if (key == "w.line") {
      end.worker.last_lines.push_back(unescape_field(value));
    } else {
      f.values[std::string(key)] = unescape_field(value);
    }
  });
  end.kind = decode_kind(f);
  end.signal = static_cast<int>(f.number("signal", 0));
  end.node_rank = static_cast<int>(f.number("node_rank", 0));
  end.host = f.string("host");
  end.agent_pid = f.number("agent_pid", 0);
  end.what = f.string("what");
  end.lost_agent = static_cast<int>(f.number("lost_agent", -1));
  end.lost_why = f.string("lost_why");
  end.time = from_millis(f.number("time_ms", 0));
  if (end.names_worker()) {
    decode_worker(f, end.worker);
    if (f.values.count("b.rank")) end.blame = decode_blame(f);
  }
  return end;
}

}  // namespace ddp::launcher
