// The TCPStore server's side of PyTorch's TCPStore protocol (torch_wire.h): what a
// torch.distributed.TCPStore client (1.13, or 2.x with the VALIDATE handshake) sends, answered from the same key
// space as ddp's clients. tcp_store_server_impl.h says how the server fits together.
#include "ddp/error.h"
#include "store/tcp_store_server_impl.h"
#include "util/log.h"

namespace ddp {

using detail::cat;
using detail::Clock;
namespace torch_wire = detail::torch_wire;

// PyTorch clients. While a wait is parked only CANCEL_WAIT is read (a 2.x client sends it when
// its own timeout passes); anything else stays queued until the wait is answered, so replies
// keep the order of the requests.
bool TCPStoreServer::Impl::process_torch(Client& c) {
  std::size_t offset = 0;
  while (!c.closing && !c.dead) {
    torch_wire::Request request;
    std::size_t consumed = 0;
    std::string error;
    auto result = torch_wire::parse(std::string_view(c.in).substr(offset), c.dialect, request, consumed, error);
    if (result == torch_wire::Parse::NeedMore) break;
    if (result != torch_wire::Parse::Complete) return drop(c, error);
    if (c.parked && request.query != torch_wire::Query::CancelWait) break;
    offset += consumed;
    if (!handle_torch(c, request)) return false;
  }
  if (c.dead) return false;
  c.in.erase(0, offset);
  return true;
}

// A PyTorch client's request. Its protocol has no error replies: what PyTorch's own server
// would fail on (a get of a missing key, an add to a non-integer) closes the connection, as
// PyTorch's server does, with a logged reason.
bool TCPStoreServer::Impl::handle_torch(Client& c, const torch_wire::Request& q) {
  using torch_wire::Query;
  if (c.dialect == torch_wire::Dialect::Validated && c.greeted == (q.query == Query::Validate)) {
    return drop(c, c.greeted ? "a second VALIDATE" : cat("the first query was ", torch_wire::to_string(q.query),
                                                          ", not VALIDATE"));
  }
  switch (q.query) {
    case Query::Validate:
      c.greeted = true;
      return true;
    case Query::Set:
      write(q.key, q.value);
      return !c.dead;
    case Query::Append: {
      auto it = data_.find(q.key);
      std::string value = it == data_.end() ? q.value : it->second + q.value;
      if (value.size() > kMaxStoreValueBytes) {
        return drop(c, cat("append to ", detail::quote(q.key), " would make a value of ", value.size(),
                           " bytes, over the limit of ", kMaxStoreValueBytes));
      }
      write(q.key, std::move(value));
      return !c.dead;
    }
    case Query::MultiSet:
      for (std::size_t i = 0; i < q.keys.size() && !c.dead; ++i) write(q.keys[i], q.values[i]);
      return !c.dead;
    case Query::CompareSet: {
      bool changed = false;
      auto change = begin_change(q.key);
      auto value = detail::apply_compare_set(data_, q.key, q.value, q.value2, changed);
      send(c, torch_wire::encode_bytes(value));
      if (changed) end_change(q.key, change);
      return !c.dead;
    }
    case Query::Get:
    case Query::MultiGet: {
      const auto keys = q.query == Query::Get ? std::vector<std::string>{q.key} : q.keys;
      std::string out;
      for (const auto& key : keys) {
        auto it = data_.find(key);
        if (it == data_.end()) {
          return drop(c, cat(torch_wire::to_string(q.query), " of ", detail::quote(key),
                             ", which does not exist (PyTorch clients wait for a key before they get it: "
                             "was it deleted in between?)"));
        }
        out += torch_wire::encode_bytes(it->second);
      }
      send(c, out);
      return !c.dead;
    }
    case Query::Add:
      try {
        auto change = begin_change(q.key);
        const std::int64_t value = detail::apply_add(data_, q.key, q.number);
        send(c, torch_wire::encode_int64(value));
        end_change(q.key, change);
        return !c.dead;
      } catch (const Error& e) {
        return drop(c, e.what());
      }
    case Query::Check:
      send(c, torch_wire::encode_check(all_present(q.keys) ? torch_wire::CheckReply::Ready
                                                           : torch_wire::CheckReply::NotReady));
      return !c.dead;
    case Query::Wait:
      wait_for(c, Parked::TorchWait, q.keys, Clock::time_point::max());
      return !c.dead;
    case Query::CancelWait:
      if (c.parked) unpark(c);
      send(c, torch_wire::encode_wait(torch_wire::WaitReply::WaitCanceled));
      return !c.dead;
    case Query::GetNumKeys:
      send(c, torch_wire::encode_int64(static_cast<std::int64_t>(data_.size())));
      return !c.dead;
    case Query::DeleteKey:
      send(c, torch_wire::encode_int64(erase(q.key) ? 1 : 0));
      return !c.dead;
    case Query::WatchKey:
      watchers_[q.key].insert(c.fd.get());
      c.watching = true;
      send(c, torch_wire::encode_watch_registered());
      return !c.dead;
    case Query::Ping:
      send(c, torch_wire::encode_uint32(q.nonce));
      return !c.dead;
  }
  return drop(c, "unknown query");
}

}  // namespace ddp
