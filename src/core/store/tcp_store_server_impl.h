// The TCPStore server's insides, shared by its three files: tcp_store_server.cpp (the event loop
// and connections), tcp_store_server_ddp.cpp (ddp's protocol) and tcp_store_server_torch.cpp
// (PyTorch's). The keys, the parked waits and the watchers are a KeySpace (key_space.h), which
// knows nothing of sockets: the protocol handlers turn requests into KeySpace calls, and what a
// call returns (clients to answer, watchers to tell) into replies.
//
// One thread, epoll, non-blocking sockets. Blocking requests (get, wait) are parked in the key
// space and answered when their keys arrive or their deadline passes; no thread ever blocks on
// one client. A client that breaks its protocol loses its own connection (with a logged reason)
// and nobody else notices. Both protocols share the port and the key space: each connection's
// first bytes say which one it speaks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ddp/tcp_store.h"
#include "net/socket.h"
#include "store/key_space.h"
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
  using KeySpace = detail::KeySpace;
  enum class Protocol : std::uint8_t { Unknown, Ddp, Torch };
  // Where a connection is in its life.
  enum class State : std::uint8_t {
    Handshake,  // until the protocol is known and, for ddp, hello or, for PyTorch 2.x, VALIDATE
    Ready,      // serving requests
    Parked,     // a get or wait waits in the key space; later requests stay queued in `in`
    Closing,    // sends what is queued, then closes: refused, told to come back later, or said bye
    Dead,       // closed; erased from clients_ at the end of the loop iteration
  };

  struct Client {
    detail::Fd fd;
    std::string peer;  // "address:port" for log lines
    std::string in;
    std::string out;
    std::size_t out_pos = 0;
    Protocol protocol = Protocol::Unknown;  // from the first bytes
    detail::torch_wire::Dialect dialect = detail::torch_wire::Dialect::V1_13;
    State state = State::Handshake;
    bool watching_out = false;  // EPOLLOUT is among its epoll events (unsent output is queued)
    // From ddp's hello: a rank (-1: not a rank) whose connection closing without bye is a loss.
    std::int64_t rank = -1;
    std::int64_t pid = 0;
    std::string host;
  };

  // The event loop and connections (tcp_store_server.cpp).
  void watch(int fd, std::uint32_t events);
  void rewatch(Client& c);
  void run();
  int next_timeout_ms() const;
  bool is_listener(int fd) const;
  void accept_all();               // from every listener
  void accept_from(int listener);  // every connection its queue holds
  void on_event(int fd, std::uint32_t events);
  // The client with that id (its fd), or null when it is gone or closed.
  Client* find(int fd);
  // Handles every complete request buffered for `c`, after telling its protocol from its first
  // bytes. Returns false when the client was closed.
  bool process(Client& c);
  // Logs why and closes the connection. Returns false.
  bool drop(Client& c, const std::string& reason);
  // Queues bytes for the client and sends what the socket takes now; drops a client whose unread
  // replies pile up past a limit.
  void send(Client& c, std::string_view bytes);
  // Sends what it can of the output buffer (then closes a Closing client whose buffer is empty).
  // Returns false when the client was closed.
  bool flush(Client& c);
  // Closes the connection now; the Client object lives until reap(), so callers up the stack may
  // still look at it (and see State::Dead). A ddp rank that leaves without bye is recorded lost.
  void close_client(Client& c, const std::string& reason);
  void reap();

  // What the key space asks for (tcp_store_server.cpp): a change's Effects, and waits that are
  // over. Answers every client first, then handles what each sent while it was parked.
  void apply(KeySpace::Effects effects);
  void release(std::vector<KeySpace::Answer> answers);
  // Answers now when every key exists, else parks the client.
  void wait(Client& c, KeySpace::Want want, std::vector<std::string> keys, Clock::time_point deadline);
  void answer(Client& c, KeySpace::Answer answer);
  void expire();

  // ddp's protocol (tcp_store_server_ddp.cpp).
  bool process_ddp(Client& c);
  bool greet_ddp(Client& c, const detail::wire::Request& q);
  bool handle_ddp(Client& c, detail::wire::Request& q);
  void answer_ddp(Client& c, KeySpace::Answer answer);
  void reply(Client& c, const detail::wire::Response& response) { send(c, detail::wire::encode(response)); }

  // PyTorch's protocol (tcp_store_server_torch.cpp).
  bool process_torch(Client& c);
  bool handle_torch(Client& c, detail::torch_wire::Request& q);
  void answer_torch(Client& c);
  void notify_watchers(const KeySpace::Notice& notice);

  static bool alive(const Client& c) { return c.state != State::Dead; }

  std::string job_id_;
  std::uint64_t generation_ = 0;       // 0: serve clients of any generation
  std::vector<detail::Fd> listeners_;  // one port, several accept queues (listen_on_shared)
  detail::Fd epoll_;
  detail::Fd wake_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  bool accepting_ = false;  // the last accept_all() took a connection: more may be queued
  std::atomic<std::size_t> num_clients_{0};
  std::thread thread_;
  // Everything below is touched by the server thread only.
  KeySpace keys_;
  std::unordered_map<int, std::unique_ptr<Client>> clients_;  // by fd, which is also the KeySpace id
  std::vector<int> dead_;                                     // closed since the last reap()
};

}  // namespace ddp
