// The TCPStore server's side of PyTorch's TCPStore protocol (torch_wire.h): what a
// torch.distributed.TCPStore client (1.13, or 2.x with the VALIDATE handshake) sends, answered
// from the same key space as ddp's clients, and 1.13's watch_key events.
// tcp_store_server_impl.h says how the server fits together.
#include "ddp/error.h"
#include "store/tcp_store_server_impl.h"
#include "util/log.h"

namespace ddp {

using detail::cat;
namespace torch_wire = detail::torch_wire;

// PyTorch clients. While a wait is parked only CANCEL_WAIT is read (a 2.x client sends it when
// its own timeout passes); anything else stays queued until the wait is answered, so replies
// keep the order of the requests.
bool TCPStoreServer::Impl::process_torch(Client& c) {
  std::size_t offset = 0;
  while (c.state == State::Handshake || c.state == State::Ready || c.state == State::Parked) {
    torch_wire::Request request;
    std::size_t consumed = 0;
    std::string error;
    auto result = torch_wire::parse(std::string_view(c.in).substr(offset), c.dialect, request, consumed, error);
    if (result == torch_wire::Parse::NeedMore) break;
    if (result != torch_wire::Parse::Complete) return drop(c, error);
    if (c.state == State::Parked && request.query != torch_wire::Query::CancelWait) break;
    offset += consumed;
    if (!handle_torch(c, request)) return false;
  }
  if (!alive(c)) return false;
  c.in.erase(0, offset);
  return true;
}

// A PyTorch client's request. Its protocol has no error replies: what PyTorch's own server
// would fail on (a get of a missing key, an add to a non-integer) closes the connection, as
// PyTorch's server does, with a logged reason. Replies go out before the change's effects.
bool TCPStoreServer::Impl::handle_torch(Client& c, torch_wire::Request& q) {
  using torch_wire::Query;
  if (c.state == State::Handshake || q.query == Query::Validate) {  // 2.x: VALIDATE first, and only then
    if (c.state != State::Handshake) return drop(c, "a second VALIDATE");
    if (q.query != Query::Validate) {
      return drop(c, cat("the first query was ", torch_wire::to_string(q.query), ", not VALIDATE"));
    }
    c.state = State::Ready;
    return true;
  }
  switch (q.query) {
    case Query::Validate:  // handled above
      return true;
    case Query::Set: apply(keys_.set(q.key, std::move(q.value))); return alive(c);
    case Query::Append: {
      KeySpace::Effects effects;
      try {
        effects = keys_.append(q.key, q.value, kMaxStoreValueBytes);
      } catch (const InvalidArgument& e) {
        return drop(c, e.what());
      }
      apply(std::move(effects));
      return alive(c);
    }
    case Query::MultiSet:
      for (std::size_t i = 0; i < q.keys.size() && alive(c); ++i) apply(keys_.set(q.keys[i], std::move(q.values[i])));
      return alive(c);
    case Query::CompareSet: {
      auto [value, effects] = keys_.compare_set(q.key, q.value, q.value2);
      send(c, torch_wire::encode_bytes(value));
      apply(std::move(effects));
      return alive(c);
    }
    case Query::Get:
    case Query::MultiGet: {
      const auto keys = q.query == Query::Get ? std::vector<std::string>{std::move(q.key)} : std::move(q.keys);
      std::string out;
      for (const auto& key : keys) {
        const std::string* value = keys_.find(key);
        if (!value) {
          return drop(c, cat(torch_wire::to_string(q.query), " of ", detail::quote(key),
                             ", which does not exist (PyTorch clients wait for a key before they get it: "
                             "was it deleted in between?)"));
        }
        out += torch_wire::encode_bytes(*value);
      }
      send(c, out);
      return alive(c);
    }
    case Query::Add: {
      KeySpace::Changed<std::int64_t> added{};
      try {
        added = keys_.add(q.key, q.number);
      } catch (const InvalidArgument& e) {
        return drop(c, e.what());
      }
      send(c, torch_wire::encode_int64(added.value));
      apply(std::move(added.effects));
      return alive(c);
    }
    case Query::Check:
      send(c, torch_wire::encode_check(keys_.contains_all(q.keys) ? torch_wire::CheckReply::Ready
                                                                  : torch_wire::CheckReply::NotReady));
      return alive(c);
    case Query::Wait: wait(c, KeySpace::Want::Keys, std::move(q.keys), KeySpace::kNoDeadline); return alive(c);
    case Query::CancelWait:
      if (keys_.cancel_wait(c.fd.get())) c.state = State::Ready;
      send(c, torch_wire::encode_wait(torch_wire::WaitReply::WaitCanceled));
      return alive(c);
    case Query::GetNumKeys: send(c, torch_wire::encode_int64(static_cast<std::int64_t>(keys_.size()))); return alive(c);
    case Query::DeleteKey: {
      auto [existed, effects] = keys_.erase(q.key);
      send(c, torch_wire::encode_int64(existed ? 1 : 0));
      apply(std::move(effects));
      return alive(c);
    }
    case Query::WatchKey:
      keys_.watch(c.fd.get(), q.key);
      send(c, torch_wire::encode_watch_registered());
      return alive(c);
    case Query::Ping: send(c, torch_wire::encode_uint32(q.nonce)); return alive(c);
  }
  return drop(c, "unknown query");
}

// PyTorch waits have no deadline: an answer always means every key exists.
void TCPStoreServer::Impl::answer_torch(Client& c) {
  send(c, torch_wire::encode_wait(torch_wire::WaitReply::StopWaiting));
}

void TCPStoreServer::Impl::notify_watchers(const KeySpace::Notice& notice) {
  using torch_wire::WatchEvent;
  const auto event = notice.change == KeySpace::Change::Created   ? WatchEvent::KeyCreated
                     : notice.change == KeySpace::Change::Updated ? WatchEvent::KeyUpdated
                                                                  : WatchEvent::KeyDeleted;
  const std::string bytes = torch_wire::encode_watch_event(event, notice.key, notice.old_value, notice.new_value);
  for (int fd : notice.watchers) {
    if (Client* watcher = find(fd)) send(*watcher, bytes);
  }
}

}  // namespace ddp
