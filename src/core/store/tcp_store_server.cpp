// The TCPStore server: one thread, epoll, non-blocking sockets. Blocking requests (get, wait) are
// parked on the keys they need and answered when the keys arrive or their deadline passes; no
// thread ever blocks on one client. A client that breaks the protocol loses its own connection
// (with a logged reason) and nobody else notices.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "net/socket.h"
#include "store/kv_semantics.h"
#include "store/lost_ranks.h"
#include "store/wire.h"
#include "util/log.h"

namespace ddp {

using detail::cat;
using detail::Clock;
using detail::Fd;
using detail::LogLevel;
namespace wire = detail::wire;

class TCPStoreServer::Impl {
 public:
  Impl(std::uint16_t port, std::string job_id) : job_id_(std::move(job_id)) {
    detail::raise_open_file_limit();
    listener_ = detail::listen_on(port);
    detail::set_nonblocking(listener_.get());
    port_ = detail::local_port(listener_.get());
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!epoll_ || !wake_) throw IOError(cat("store server: cannot create epoll or eventfd: ", std::strerror(errno)));
    watch(listener_.get(), EPOLLIN);
    watch(wake_.get(), EPOLLIN);
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() {
    stop_.store(true);
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
    thread_.join();
  }

  std::uint16_t port() const { return port_; }
  const std::string& job_id() const { return job_id_; }
  std::size_t num_clients() const { return num_clients_.load(); }

 private:
  struct Client {
    Fd fd;
    std::string peer;  // "address:port" for log lines
    std::string in;
    std::string out;
    std::size_t out_pos = 0;
    bool preamble_seen = false;
    bool greeted = false;
    bool bye = false;
    bool closing = false;  // flush `out`, then close
    bool dead = false;     // closed; erased from clients_ at the end of the loop iteration
    std::int64_t rank = -1;
    std::int64_t pid = 0;
    std::string host;
    bool parked = false;  // a get or wait is waiting for keys
    wire::Request parked_request;
    Clock::time_point deadline;
  };

  void watch(int fd, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  }

  void rewatch(Client& c) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (c.out_pos < c.out.size() ? std::uint32_t{EPOLLOUT} : 0u);
    ev.data.fd = c.fd.get();
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  }

  void run() {
    std::vector<epoll_event> events(256);
    while (!stop_.load()) {
      int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), next_timeout_ms());
      if (n < 0 && errno != EINTR) {
        detail::log(LogLevel::Error, "store server: epoll_wait failed: ", std::strerror(errno));
        break;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listener_.get()) {
          accept_all();
        } else if (fd == wake_.get()) {
          std::uint64_t value;
          [[maybe_unused]] auto r = ::read(wake_.get(), &value, sizeof value);
        } else {
          on_event(fd, events[i].events);
        }
      }
      expire_parked();
      reap();
    }
    // Shutting down: close every client (they see the server go away).
    clients_.clear();
    num_clients_.store(0);
  }

  int next_timeout_ms() const {
    if (parked_.empty()) return -1;
    auto earliest = Clock::time_point::max();
    for (int fd : parked_) earliest = std::min(earliest, clients_.at(fd)->deadline);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(earliest - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60'000));
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
          detail::log(LogLevel::Error, "store server: out of file descriptors; raise `ulimit -n` (",
                      clients_.size(), " clients connected)");
        }
        return;
      }
      auto client = std::make_unique<Client>();
      client->fd = Fd(fd);
      client->peer = describe(addr);
      detail::set_nodelay(fd);
      watch(fd, EPOLLIN | EPOLLRDHUP);
      clients_.emplace(fd, std::move(client));
      num_clients_.store(clients_.size());
    }
  }

  static std::string describe(const sockaddr_storage& addr) {
    char text[INET6_ADDRSTRLEN] = "?";
    std::uint16_t port = 0;
    if (addr.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      port = ntohs(a->sin6_port);
    } else if (addr.ss_family == AF_INET) {
      auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      port = ntohs(a->sin_port);
    }
    return cat(text, ":", port);
  }

  void on_event(int fd, std::uint32_t events) {
    auto it = clients_.find(fd);
    if (it == clients_.end() || it->second->dead) return;
    Client& c = *it->second;
    if (events & EPOLLOUT) {
      if (!flush(c)) return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      char chunk[64 * 1024];
      for (;;) {
        ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n > 0) {
          c.in.append(chunk, static_cast<std::size_t>(n));
          if (c.in.size() > (1u << 20) && !process(c)) return;  // parse early: a frame may be oversized
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0 && errno == EINTR) continue;
        // EOF or error. What arrived before it still counts (a goodbye, say); then the peer is gone.
        const std::string reason = n == 0 ? "" : std::strerror(errno);
        process(c);
        if (!c.dead && !c.in.empty()) {
          drop(c, cat("the connection closed in the middle of a message (", c.in.size(), " bytes of an unfinished frame)"));
        } else {
          close_client(c, reason);
        }
        return;
      }
      process(c);
    }
  }

  // Handles every complete frame buffered for `c`. Returns false when the client was closed.
  bool process(Client& c) {
    if (!c.preamble_seen) {
      const auto& p = wire::kPreamble;
      const std::size_t n = std::min(c.in.size(), p.size());
      if (c.in.compare(0, n, p.data(), n) != 0) {
        return drop(c, cat("not a ddp store client: the connection began with ", detail::quote(c.in.substr(0, 16))));
      }
      if (c.in.size() < p.size()) return true;
      c.in.erase(0, p.size());
      c.preamble_seen = true;
    }
    std::size_t offset = 0;
    while (!c.parked && !c.closing && !c.dead) {
      wire::Request request;
      std::size_t consumed = 0;
      std::string error;
      auto result = wire::parse(std::string_view(c.in).substr(offset), request, consumed, error);
      if (result == wire::Parse::NeedMore) break;
      if (result != wire::Parse::Complete) {
        return drop(c, error);
      }
      offset += consumed;
      if (!handle(c, request)) return false;
    }
    if (c.dead) return false;
    c.in.erase(0, offset);
    return true;
  }

  bool drop(Client& c, const std::string& reason) {
    detail::log(LogLevel::Warn, "store server: closing the connection from ", c.peer,
                c.rank >= 0 ? cat(" (rank ", c.rank, ")") : std::string(), ": ", reason);
    close_client(c, reason);
    return false;
  }

  void reply(Client& c, const wire::Response& response) {
    if (c.dead) return;
    c.out += wire::encode(response);
    flush(c);
  }

  // Sends what it can of the output buffer. Returns false when the client was closed.
  bool flush(Client& c) {
    while (c.out_pos < c.out.size()) {
      ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      close_client(c, std::strerror(errno));
      return false;
    }
    if (c.out_pos == c.out.size()) {
      c.out.clear();
      c.out_pos = 0;
      if (c.closing) {
        close_client(c, "");
        return false;
      }
    }
    rewatch(c);
    return true;
  }

  bool handle(Client& c, const wire::Request& q) {
    if (!c.greeted) {
      if (q.op != wire::Op::Hello) return drop(c, cat("the first message was ", wire::to_string(q.op), ", not hello"));
      if (q.version != wire::kVersion) {
        return drop(c, cat("protocol version ", q.version, " is not supported (this server speaks ", wire::kVersion, ")"));
      }
      if (!job_id_.empty() && !q.job_id.empty() && q.job_id != job_id_) {
        detail::log(LogLevel::Warn, "store server: refusing ", c.peer, " (rank ", q.number, ", pid ", q.pid, " on ",
                    q.host, "): it belongs to job ", detail::quote(q.job_id), ", this store serves job ",
                    detail::quote(job_id_));
        c.closing = true;
        reply(c, {wire::Status::Refused, job_id_});
        return false;
      }
      c.greeted = true;
      c.rank = q.number;
      c.pid = q.pid;
      c.host = q.host;
      if (c.rank >= 0) ++connections_of_rank_[c.rank];
      reply(c, {wire::Status::Ok});
      return true;
    }
    switch (q.op) {
      case wire::Op::Hello:
        return drop(c, "a second hello");
      case wire::Op::Set:
        data_[q.key] = q.value;
        reply(c, {wire::Status::Ok});
        wake(q.key);
        return true;
      case wire::Op::Get:
      case wire::Op::Wait:
        if (!try_answer(c, q)) {
          c.parked = true;
          c.parked_request = q;
          c.deadline = Clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(q.number, 0));
          parked_.insert(c.fd.get());
          for (const auto& key : needed_keys(q)) waiters_[key].insert(c.fd.get());
        }
        return true;
      case wire::Op::Add:
        try {
          std::int64_t value = detail::apply_add(data_, q.key, q.number);
          reply(c, {wire::Status::Number, {}, value});
          wake(q.key);
        } catch (const Error& e) {
          reply(c, {wire::Status::Error, e.what()});
        }
        return true;
      case wire::Op::CompareSet: {
        bool changed = false;
        auto value = detail::apply_compare_set(data_, q.key, q.value, q.value2, changed);
        reply(c, {wire::Status::Value, std::move(value)});
        if (changed) wake(q.key);
        return true;
      }
      case wire::Op::Check: {
        bool all = std::all_of(q.keys.begin(), q.keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
        reply(c, {wire::Status::Number, {}, all ? 1 : 0});
        return true;
      }
      case wire::Op::Delete:
        reply(c, {wire::Status::Number, {}, static_cast<std::int64_t>(data_.erase(q.key))});
        return true;
      case wire::Op::NumKeys:
        reply(c, {wire::Status::Number, {}, static_cast<std::int64_t>(data_.size())});
        return true;
      case wire::Op::Bye:
        c.bye = true;
        return true;
      case wire::Op::Ping:
        reply(c, {wire::Status::Ok});
        return true;
    }
    return drop(c, "unknown request");
  }

  static std::vector<std::string> needed_keys(const wire::Request& q) {
    return q.op == wire::Op::Get ? std::vector<std::string>{q.key} : q.keys;
  }

  // Answers a get or wait whose keys are all present. Returns false when it must wait.
  bool try_answer(Client& c, const wire::Request& q) {
    for (const auto& key : needed_keys(q)) {
      if (!data_.count(key)) return false;
    }
    if (q.op == wire::Op::Get) {
      reply(c, {wire::Status::Value, data_.at(q.key)});
    } else {
      reply(c, {wire::Status::Ok});
    }
    return true;
  }

  void unpark(Client& c) {
    for (const auto& key : needed_keys(c.parked_request)) {
      auto it = waiters_.find(key);
      if (it == waiters_.end()) continue;
      it->second.erase(c.fd.get());
      if (it->second.empty()) waiters_.erase(it);
    }
    parked_.erase(c.fd.get());
    c.parked = false;
  }

  void wake(const std::string& key) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    std::vector<int> fds(it->second.begin(), it->second.end());
    for (int fd : fds) {
      auto found = clients_.find(fd);
      if (found == clients_.end()) continue;
      Client& c = *found->second;
      if (c.dead || !c.parked || !try_answer(c, c.parked_request)) continue;
      unpark(c);
      process(c);  // requests that arrived while it was parked
    }
  }

  void expire_parked() {
    const auto now = Clock::now();
    std::vector<int> expired;
    for (int fd : parked_) {
      if (clients_.at(fd)->deadline <= now) expired.push_back(fd);
    }
    for (int fd : expired) {
      Client& c = *clients_.at(fd);
      wire::Response response{wire::Status::Timeout};
      for (const auto& key : needed_keys(c.parked_request)) {
        if (!data_.count(key)) response.keys.push_back(key);
      }
      unpark(c);
      reply(c, response);
      process(c);
    }
  }

  // Closes the connection now; the Client object lives until reap(), so callers up the stack may
  // still look at it (and see `dead`).
  void close_client(Client& c, const std::string& reason) {
    if (c.dead) return;
    c.dead = true;
    if (c.parked) unpark(c);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);  // the fd closes in reap()
    dead_.push_back(&c);
    if (!c.greeted || c.rank < 0) return;
    --connections_of_rank_[c.rank];
    if (c.bye) return;
    // The process died or its connection broke: leave a record every survivor can read.
    const std::string key = detail::lost_rank_key(static_cast<int>(c.rank));
    data_[key] = cat("pid ", c.pid, " on ", c.host, (reason.empty() ? std::string() : ": " + reason));
    detail::log(LogLevel::Info, "store server: rank ", c.rank, " (pid ", c.pid, " on ", c.host,
                ") closed its connection without a goodbye");
    wake(key);
  }

  void reap() {
    if (dead_.empty()) return;
    for (auto it = clients_.begin(); it != clients_.end();) {
      it = it->second->dead ? clients_.erase(it) : std::next(it);
    }
    dead_.clear();
    num_clients_.store(clients_.size());
  }

  std::string job_id_;
  Fd listener_;
  Fd epoll_;
  Fd wake_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> num_clients_{0};
  std::thread thread_;
  // Everything below is touched by the server thread only.
  detail::KeyValueMap data_;
  std::unordered_map<int, std::unique_ptr<Client>> clients_;
  std::unordered_map<std::string, std::set<int>> waiters_;
  std::set<int> parked_;
  std::vector<Client*> dead_;
  std::map<std::int64_t, int> connections_of_rank_;
};

TCPStoreServer::TCPStoreServer(std::uint16_t port, std::string job_id)
    : impl_(std::make_unique<Impl>(port, std::move(job_id))) {}
TCPStoreServer::~TCPStoreServer() = default;
std::uint16_t TCPStoreServer::port() const { return impl_->port(); }
const std::string& TCPStoreServer::job_id() const { return impl_->job_id(); }
std::size_t TCPStoreServer::num_clients() const { return impl_->num_clients(); }

}  // namespace ddp
