// A TCPStore client's connection to its server, in one protocol: the interface TCPStore calls,
// and what both protocols' connections share (ddp_connection.cpp, torch_connection.cpp): the
// socket, the peer's name for messages, and the rule that a failed exchange leaves the
// connection broken, since the stream may be out of step with the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "net/socket.h"

namespace ddp::detail {

// Extra time a client waits for the server's own timeout reply before calling the server dead.
inline constexpr auto kReplyGrace = std::chrono::seconds(10);

// One connection. Not thread-safe: TCPStore serializes calls. Each call throws TimeoutError when
// its deadline passes and PeerLostError when the connection breaks (or broke before).
class StoreConnection {
 public:
  virtual ~StoreConnection() = default;
  virtual void set(const std::string& key, const std::string& value, Clock::time_point deadline) = 0;
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual std::int64_t add(const std::string& key, std::int64_t delta, Clock::time_point deadline) = 0;
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                                  Clock::time_point deadline) = 0;
  virtual bool check(const std::vector<std::string>& keys, Clock::time_point deadline) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Whether the protocol has a multi_get request (PyTorch 1.13's has none: TCPStore then waits
  // and gets each), and the request itself: every key's value, waiting up to `timeout` for all.
  virtual bool has_multi_get() const { return false; }
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  virtual bool delete_key(const std::string& key, Clock::time_point deadline) = 0;
  virtual std::int64_t num_keys(Clock::time_point deadline) = 0;
  // The longest key the protocol carries.
  virtual std::size_t max_key_bytes() const { return kMaxStoreKeyBytes; }

 protected:
  // `peer` names the server in messages ("the store at host:port"), `where` is its host:port.
  StoreConnection(std::string peer, std::string where) : peer_(std::move(peer)), where_(std::move(where)) {}

  // Runs one exchange (`io()`, which sends and reads on fd_) for the request `op`. A timeout
  // becomes TimeoutError, an I/O failure PeerLostError, both naming `op` and the server, and
  // either leaves the connection broken. Throws PeerLostError at once on a broken connection.
  template <typename IO>
  auto exchange(std::string_view op, IO&& io) -> decltype(io()) {
    check_not_broken();
    try {
      return io();
    } catch (const TimeoutError& e) {
      fail(e.what());
      throw no_reply(op);
    } catch (const IOError& e) {
      fail(e.what());
      throw lost_connection(op, e.what());
    }
  }

  // Throws PeerLostError when an earlier exchange broke the connection.
  void check_not_broken() const;
  // Marks the connection broken: every later exchange fails at once with `reason`.
  void fail(std::string reason);
  // Closes the socket and forgets any failure, so that the next connect starts afresh.
  void disconnect();
  bool broken() const { return broken_; }
  const std::string& broken_reason() const { return broken_reason_; }
  // A reply the protocol does not allow: breaks the connection and throws IOError
  // "<op>: unexpected reply<detail> from <peer>".
  [[noreturn]] void unexpected_reply(std::string_view op, std::string_view detail = "");

  // Sends all of `bytes`, and reads exactly `size` bytes; IOError when the server closed the
  // connection, TimeoutError at the deadline (to be given to exchange()).
  void send_bytes(std::string_view bytes, Clock::time_point deadline);
  void read(char* out, std::size_t size, Clock::time_point deadline);

  TimeoutError no_reply(std::string_view op) const;
  PeerLostError lost_connection(std::string_view op, const std::string& what) const;
  // A get whose key did not appear in time.
  TimeoutError get_timed_out(const std::string& key, std::chrono::milliseconds timeout) const;
  // A wait (or multi_get, `op`) whose keys did not all appear in time.
  TimeoutError wait_timed_out(const std::vector<std::string>& missing, std::chrono::milliseconds timeout,
                              std::string_view op = "wait") const;

  const std::string peer_;
  const std::string where_;
  Fd fd_;

 private:
  bool broken_ = false;
  std::string broken_reason_;
};

// A connection in ddp's protocol (ddp_connection.cpp): connects, says hello and waits out a
// server of an earlier generation. Throws as TCPStore's constructor says.
std::unique_ptr<StoreConnection> connect_ddp(const TCPStoreOptions& options);
// A connection in PyTorch 1.13's protocol (torch_connection.cpp).
std::unique_ptr<StoreConnection> connect_torch(const TCPStoreOptions& options);

}  // namespace ddp::detail
