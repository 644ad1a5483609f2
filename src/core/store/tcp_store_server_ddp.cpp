// The TCPStore server's side of ddp's protocol (wire.h): hello (job ids, generations, ranks), then
// requests turned into KeySpace calls and their results into response frames.
// tcp_store_server_impl.h says how the server fits together.
#include <algorithm>
#include <chrono>
#include <utility>

#include "ddp/error.h"
#include "store/tcp_store_server_impl.h"
#include "util/log.h"

namespace ddp {

using detail::cat;
using detail::LogLevel;
namespace wire = detail::wire;

namespace {

// The deadline of a get or wait that may take `timeout_ms` from now (negative: none at all).
// A timeout too long for the clock means no deadline: the bytes come from anyone.
detail::Clock::time_point deadline_after(std::int64_t timeout_ms) {
  const auto now = detail::Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(detail::KeySpace::kNoDeadline - now);
  const auto timeout = std::chrono::milliseconds(std::max<std::int64_t>(timeout_ms, 0));
  return timeout >= room ? detail::KeySpace::kNoDeadline : now + timeout;
}

// A multi_get's answer: its values, or an error when together they exceed one frame.
wire::Response values_reply(std::vector<std::string> values) {
  std::size_t bytes = 5;  // the status and the count
  for (const auto& value : values) bytes += 4 + value.size();
  if (bytes > wire::kMaxFrameBytes) {
    return {wire::Status::Error,
            cat("multi_get: the ", values.size(), " values total ", bytes, " bytes, more than one reply carries (",
                wire::kMaxFrameBytes, "); get the keys in smaller groups")};
  }
  wire::Response response{wire::Status::Values};
  response.values = std::move(values);
  return response;
}

}  // namespace

bool TCPStoreServer::Impl::process_ddp(Client& c) {
  std::size_t offset = 0;
  while (c.state == State::Handshake || c.state == State::Ready) {
    wire::Request request;
    std::size_t consumed = 0;
    std::string error;
    auto result = wire::parse(std::string_view(c.in).substr(offset), request, consumed, error);
    if (result == wire::Parse::NeedMore) break;
    if (result == wire::Parse::UnknownRequest && c.state == State::Ready) {
      // A newer client's request: it learns why, and the connection goes on.
      offset += consumed;
      reply(c, {wire::Status::Error, cat("the store server does not know this request (", error,
                                         "): it runs an older ddp than this client. Run the job's processes "
                                         "and its launcher from one ddp build.")});
      if (!alive(c)) return false;
      continue;
    }
    if (result != wire::Parse::Complete) return drop(c, error);
    offset += consumed;
    const bool go_on = c.state == State::Handshake ? greet_ddp(c, request) : handle_ddp(c, request);
    if (!go_on) return false;
  }
  if (!alive(c)) return false;
  c.in.erase(0, offset);
  return true;
}

// The first request must be hello; it says who the client is, and whether it may stay.
bool TCPStoreServer::Impl::greet_ddp(Client& c, const wire::Request& q) {
  if (q.op != wire::Op::Hello) return drop(c, cat("the first message was ", wire::to_string(q.op), ", not hello"));
  if (q.version != wire::kVersion) {
    return drop(c, cat("protocol version ", q.version, " is not supported (this server speaks ", wire::kVersion, ")"));
  }
  if (!job_id_.empty() && !q.job_id.empty() && q.job_id != job_id_) {
    detail::log(LogLevel::Warn, "store server: refusing ", c.peer, " (rank ", q.number, ", pid ", q.pid, " on ", q.host,
                "): it belongs to job ", detail::quote(q.job_id), ", this store serves job ", detail::quote(job_id_));
    c.state = State::Closing;
    reply(c, {wire::Status::Refused, job_id_});
    return false;
  }
  if (generation_ != 0 && q.generation > generation_) {
    // A client of the job's next init reached this store before it shut down: it retries.
    c.state = State::Closing;
    reply(c, {wire::Status::Later, std::to_string(generation_)});
    return false;
  }
  c.state = State::Ready;
  c.rank = q.number;
  c.pid = q.pid;
  c.host = q.host;
  reply(c, {wire::Status::Ok});
  return true;
}

// A request after hello. Replies go out before the change's effects, as a client expects its
// own answer first. Returns false when the client was closed.
bool TCPStoreServer::Impl::handle_ddp(Client& c, wire::Request& q) {
  using Want = KeySpace::Want;
  switch (q.op) {
    case wire::Op::Hello: return drop(c, "a second hello");
    case wire::Op::Set: {
      reply(c, {wire::Status::Ok});
      apply(keys_.set(q.key, std::move(q.value)));
      return alive(c);
    }
    case wire::Op::Get: wait(c, Want::Value, {std::move(q.key)}, deadline_after(q.number)); return alive(c);
    case wire::Op::Wait: wait(c, Want::Keys, std::move(q.keys), deadline_after(q.number)); return alive(c);
    case wire::Op::MultiGet: wait(c, Want::Values, std::move(q.keys), deadline_after(q.number)); return alive(c);
    case wire::Op::Add: {
      KeySpace::Changed<std::int64_t> added{};
      try {
        added = keys_.add(q.key, q.number);
      } catch (const InvalidArgument& e) {
        reply(c, {wire::Status::Error, e.what()});
        return alive(c);
      }
      reply(c, {wire::Status::Number, {}, added.value});
      apply(std::move(added.effects));
      return alive(c);
    }
    case wire::Op::CompareSet: {
      auto [value, effects] = keys_.compare_set(q.key, q.value, q.value2);
      reply(c, {wire::Status::Value, std::move(value)});
      apply(std::move(effects));
      return alive(c);
    }
    case wire::Op::Check: reply(c, {wire::Status::Number, {}, keys_.contains_all(q.keys) ? 1 : 0}); return alive(c);
    case wire::Op::Delete: {
      auto [existed, effects] = keys_.erase(q.key);
      reply(c, {wire::Status::Number, {}, existed ? 1 : 0});
      apply(std::move(effects));
      return alive(c);
    }
    case wire::Op::NumKeys:
      reply(c, {wire::Status::Number, {}, static_cast<std::int64_t>(keys_.size())});
      return alive(c);
    case wire::Op::Bye:  // the last message: this rank leaves on purpose, and is not lost
      c.state = State::Closing;
      flush(c);
      return false;
    case wire::Op::Ping: reply(c, {wire::Status::Ok}); return alive(c);
  }
  return drop(c, "unknown request");
}

void TCPStoreServer::Impl::answer_ddp(Client& c, KeySpace::Answer answer) {
  if (!answer.missing.empty()) {
    wire::Response timeout{wire::Status::Timeout};
    timeout.keys = std::move(answer.missing);
    reply(c, timeout);
  } else if (answer.want == KeySpace::Want::Value) {
    reply(c, {wire::Status::Value, std::move(answer.value)});
  } else if (answer.want == KeySpace::Want::Values) {
    reply(c, values_reply(std::move(answer.values)));
  } else {
    reply(c, {wire::Status::Ok});
  }
}

}  // namespace ddp
