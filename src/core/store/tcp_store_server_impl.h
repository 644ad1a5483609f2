// The TCPStore server's insides, shared by its two files: tcp_store_server.cpp (the event loop,
// connections, the key space and ddp's protocol) and tcp_store_server_torch.cpp (PyTorch's).
//
// One thread, epoll, non-blocking sockets. Blocking requests (get, wait) are parked on the keys
// they need and answered when the keys arrive or their deadline passes; no thread ever blocks on
// one client. A client that breaks its protocol loses its own connection (with a logged reason)
// and nobody else notices. Both protocols share the port and the key space: each connection's
// first bytes say which one it speaks, and a key set by either kind of client wakes the waiters
// (and PyTorch watchers) of both.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ddp/tcp_store.h"
#include "net/socket.h"
#include "store/kv_semantics.h"
#include "store/torch_wire.h"
#include "store/wire.h"

namespace ddp {

class TCPStoreServer::Impl {
 public:
  Impl(std::uint16_t port, std::string job_id, std::uint64_t generation);
  ~Impl();

  std::uint16_t port() const { return port_; }
  const std::string& job_id() const { return job_id_; }
  std::size_t num_clients() const { return num_clients_.load(); }

 private:
  using Clock = detail::Clock;
  enum class Protocol { Unknown, Ddp, Torch };
  // What a parked client is waiting to be told once its keys exist.
  enum class Parked { DdpGet, DdpWait, TorchWait };

  struct Client {
    detail::Fd fd;
    std::string peer;  // "address:port" for log lines
    std::string in;
    std::string out;
    std::size_t out_pos = 0;
    Protocol protocol = Protocol::Unknown;  // from the first bytes
    detail::torch_wire::Dialect dialect = detail::torch_wire::Dialect::V1_13;
    bool greeted = false;   // ddp: hello accepted; PyTorch 2.x: VALIDATE seen
    bool bye = false;
    bool closing = false;   // flush `out`, then close
    bool dead = false;      // closed; erased from clients_ at the end of the loop iteration
    bool watching = false;  // has PyTorch 1.13 watch_key registrations
    std::int64_t rank = -1;
    std::int64_t pid = 0;
    std::string host;
    bool parked = false;  // a get or wait is waiting for keys
    Parked parked_kind = Parked::DdpWait;
    std::vector<std::string> parked_keys;  // DdpGet: the one key to answer with
    Clock::time_point deadline;            // PyTorch waits have none (time_point::max())
  };

  // A change to a key in progress (see begin_change).
  struct Change {
    bool watched = false;
    bool existed = false;
    std::string old_value;  // only when watched
  };

  // The event loop and connections.
  void watch(int fd, std::uint32_t events);
  void rewatch(Client& c);
  void run();
  int next_timeout_ms() const;
  void accept_all();
  void on_event(int fd, std::uint32_t events);
  // Handles every complete request buffered for `c`, after telling its protocol from its first
  // bytes. Returns false when the client was closed.
  bool process(Client& c);
  // Logs why and closes the connection. Returns false.
  bool drop(Client& c, const std::string& reason);
  void reply(Client& c, const detail::wire::Response& response) { send(c, detail::wire::encode(response)); }
  // Queues bytes for the client and sends what the socket takes now; drops a client whose unread
  // replies pile up past a limit.
  void send(Client& c, std::string_view bytes);
  // Sends what it can of the output buffer. Returns false when the client was closed.
  bool flush(Client& c);
  // Closes the connection now; the Client object lives until reap(), so callers up the stack may
  // still look at it (and see `dead`). A ddp rank that leaves without a goodbye is recorded lost.
  void close_client(Client& c, const std::string& reason);
  void reap();

  // ddp's protocol (tcp_store_server.cpp).
  bool process_ddp(Client& c);
  bool handle(Client& c, const detail::wire::Request& q);

  // PyTorch's protocol (tcp_store_server_torch.cpp).
  bool process_torch(Client& c);
  bool handle_torch(Client& c, const detail::torch_wire::Request& q);

  // The key space. Every change to a key goes through begin_change / end_change: end_change
  // wakes the key's parked waiters and tells its PyTorch watchers (old value, new value, or its
  // deletion).
  bool all_present(const std::vector<std::string>& keys) const;
  Change begin_change(const std::string& key) const;
  void end_change(const std::string& key, const Change& change);
  void write(const std::string& key, std::string value);
  bool erase(const std::string& key);
  // Answers now when every key exists, else parks the client on the missing ones.
  void wait_for(Client& c, Parked kind, std::vector<std::string> keys, Clock::time_point deadline);
  // Answers a parked get or wait whose keys are all present. False when it must wait on.
  bool try_answer(Client& c);
  void unpark(Client& c);
  void wake(const std::string& key);
  // Answers ddp waits whose deadline passed (a PyTorch client keeps its own timeout).
  void expire_parked();

  std::string job_id_;
  std::uint64_t generation_ = 0;  // 0: serve clients of any generation
  detail::Fd listener_;
  detail::Fd epoll_;
  detail::Fd wake_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> num_clients_{0};
  std::thread thread_;
  // Everything below is touched by the server thread only.
  detail::KeyValueMap data_;
  std::unordered_map<int, std::unique_ptr<Client>> clients_;
  std::unordered_map<std::string, std::set<int>> waiters_;
  std::unordered_map<std::string, std::set<int>> watchers_;  // PyTorch 1.13 watch_key
  std::set<int> parked_;
  std::vector<Client*> dead_;
  std::map<std::int64_t, int> connections_of_rank_;
};

}  // namespace ddp
