// A TCPStore client's connection in PyTorch 1.13's protocol (torch_wire.h), to a PyTorch TCPStore
// server (torchrun's) or a ddp one. Keys get PyTorch's "/" prefix. A wait or get that times out
// closes the connection (the server forgets a wait when its connection closes; the protocol has
// no other way to cancel one) and the next call reconnects.
#include <algorithm>
#include <cstring>

#include "store/connection.h"
#include "store/torch_wire.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

class TorchConnection final : public StoreConnection {
 public:
  explicit TorchConnection(const TCPStoreOptions& options)
      : StoreConnection(cat("the PyTorch store at ", options.host, ":", options.port),
                        cat(options.host, ":", options.port)),
        options_(options) {
    connect(Clock::now() + options.timeout);
  }

  void set(const std::string& key, const std::string& value, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::Set, prefixed(key), value};
    call("set", [&] { send(q, deadline); });
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    // As PyTorch's client: wait for the key, then get it.
    const auto deadline = Clock::now() + timeout;
    if (!wait_until({key}, deadline)) throw get_timed_out(key, timeout);
    return get_now(key, deadline + kReplyGrace);
  }

  std::int64_t add(const std::string& key, std::int64_t delta, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::Add, prefixed(key)};
    q.number = delta;
    try {
      return call("add", [&] {
        send(q, deadline);
        return read_int64(deadline);
      });
    } catch (const PeerLostError&) {
      // A PyTorch server has no error reply: it closes the connection when the key holds
      // something that is not an integer. Tell that apart from a dead server.
      explain_failed_add(key, deadline);
      throw;
    }
  }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                          Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::CompareSet, prefixed(key), expected, desired};
    return call("compare_set", [&] {
      send(q, deadline);
      return read_bytes(deadline);
    });
  }

  bool check(const std::vector<std::string>& keys, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::Check};
    for (const auto& key : keys) q.keys.push_back(prefixed(key));
    const auto reply = call("check", [&] {
      send(q, deadline);
      return read_u8(deadline);
    });
    if (reply > static_cast<std::uint8_t>(torch_wire::CheckReply::NotReady)) unexpected_reply("check", reply);
    return reply == static_cast<std::uint8_t>(torch_wire::CheckReply::Ready);
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    if (wait_until(keys, Clock::now() + timeout)) return;
    // Name the keys still missing, on a fresh connection (best effort: all of them otherwise).
    std::vector<std::string> missing;
    try {
      connect(Clock::now() + std::chrono::seconds(5));  // the server just answered: it accepts at once
      for (const auto& key : keys) {
        if (!check({key}, Clock::now() + std::chrono::seconds(5))) missing.push_back(key);
      }
    } catch (const Error&) {
      missing = keys;
    }
    throw wait_timed_out(missing, timeout);
  }

  bool delete_key(const std::string& key, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::DeleteKey, prefixed(key)};
    return call("delete_key", [&] {
             send(q, deadline);
             return read_int64(deadline);
           }) != 0;
  }

  std::int64_t num_keys(Clock::time_point deadline) override {
    return call("num_keys", [&] {
      send({torch_wire::Query::GetNumKeys}, deadline);
      return read_int64(deadline);
    });
  }

  std::size_t max_key_bytes() const override { return kMaxStoreKeyBytes - torch_wire::kKeyPrefix.size(); }

 private:
  static std::string prefixed(const std::string& key) { return cat(torch_wire::kKeyPrefix, key); }

  // Connects and asks for the key count: a PyTorch 1.13 server (or a ddp one) answers; a 2.x
  // server closes the connection, since it expects a VALIDATE handshake first.
  void connect(Clock::time_point deadline) {
    disconnect();
    fd_ = connect_with_retry(options_.host, options_.port, deadline, "the store");
    try {
      send({torch_wire::Query::GetNumKeys}, deadline);
      read_int64(deadline);
    } catch (const TimeoutError&) {
      fd_.reset();
      throw TimeoutError(cat(peer_, " accepted the connection but did not answer a PyTorch 1.13 TCPStore request in ",
                             format_duration(options_.timeout),
                             ": it may be stopped, or not a PyTorch 1.13 TCPStore (newer PyTorch stores expect "
                             "another protocol). Under ddprun, DDP_STORE_PROTOCOL=ddp selects ddp's protocol."));
    } catch (const IOError& e) {
      fd_.reset();
      throw IOError(cat(peer_, " closed the connection at the first request (", e.what(),
                        "): it does not speak PyTorch 1.13's TCPStore protocol. Newer PyTorch stores (2.x "
                        "with the VALIDATE handshake) expect a handshake ddp does not send; launch with PyTorch "
                        "1.13's torchrun, or with ddprun (which exports DDP_STORE_PROTOCOL=ddp)."));
    }
  }

  // One exchange, reconnecting first when an earlier timeout closed the connection (a connect
  // failure is its own error, not the exchange's).
  template <typename IO>
  auto call(std::string_view op, IO&& io) -> decltype(io()) {
    check_not_broken();
    if (!fd_) connect(Clock::now() + options_.timeout);
    return exchange(op, io);
  }

  // Sends WAIT and reads STOP_WAITING. False at the deadline, with the connection closed.
  bool wait_until(const std::vector<std::string>& keys, Clock::time_point deadline) {
    torch_wire::Request q{torch_wire::Query::Wait};
    for (const auto& key : keys) q.keys.push_back(prefixed(key));
    call("wait", [&] { send(q, deadline); });
    std::uint8_t reply = 0;
    try {
      reply = call("wait", [&] { return read_u8(deadline); });
    } catch (const TimeoutError&) {
      disconnect();  // the server drops the parked wait with the connection
      return false;
    }
    if (reply != static_cast<std::uint8_t>(torch_wire::WaitReply::StopWaiting)) unexpected_reply("wait", reply);
    return true;
  }

  std::string get_now(const std::string& key, Clock::time_point deadline) {
    torch_wire::Request q{torch_wire::Query::Get, prefixed(key)};
    return call("get", [&] {
      send(q, deadline);
      return read_bytes(deadline);
    });
  }

  // After an add lost its connection: reconnect, and when the key holds a non-integer, say so.
  // `deadline` is the add's own: a live server answers the probe at once.
  void explain_failed_add(const std::string& key, Clock::time_point deadline) {
    const std::string lost = broken_reason();
    const auto probe = std::max(deadline, Clock::now() + std::chrono::seconds(2));
    std::string value;
    try {
      connect(std::min(deadline, Clock::now() + std::chrono::seconds(2)));
      if (!check({key}, probe)) return;
      value = get_now(key, probe);
    } catch (const Error&) {
      fd_.reset();
      fail(lost);  // the server is gone: the connection stays broken, and the add's error stands
      return;
    }
    if (parse_int(value)) return;
    throw InvalidArgument(cat("store add(", quote(key), "): the key holds ", quote(value), ", not an integer counter (",
                              peer_, " closed the connection over it); use a key of its own for counters"));
  }

  void send(const torch_wire::Request& q, Clock::time_point deadline) {
    send_bytes(torch_wire::encode(q, torch_wire::Dialect::V1_13), deadline);
  }

  std::uint8_t read_u8(Clock::time_point deadline) {
    char c = 0;
    read(&c, 1, deadline);
    return static_cast<std::uint8_t>(c);
  }

  std::int64_t read_int64(Clock::time_point deadline) {
    std::int64_t v = 0;
    read(reinterpret_cast<char*>(&v), sizeof v, deadline);
    return v;
  }

  std::string read_bytes(Clock::time_point deadline) {
    std::string buffer(8, '\0');
    read(buffer.data(), 8, deadline);
    std::string value, error;
    std::size_t consumed = 0;
    auto result = torch_wire::parse_bytes(buffer, value, consumed, error);
    if (result == torch_wire::Parse::NeedMore) {
      std::uint64_t size = 0;
      std::memcpy(&size, buffer.data(), 8);
      buffer.resize(8 + size);
      read(buffer.data() + 8, size, deadline);
      result = torch_wire::parse_bytes(buffer, value, consumed, error);
    }
    if (result != torch_wire::Parse::Complete) throw IOError(cat(peer_, " sent a bad reply: ", error));
    return value;
  }

  [[noreturn]] void unexpected_reply(std::string_view op, std::uint8_t reply) {
    StoreConnection::unexpected_reply(op, cat(" ", static_cast<int>(reply)));
  }

  const TCPStoreOptions options_;
};

}  // namespace

std::unique_ptr<StoreConnection> connect_torch(const TCPStoreOptions& options) {
  return std::make_unique<TorchConnection>(options);
}

}  // namespace ddp::detail
