// The TCPStore server: the event loop, connections, and carrying out what the key space asks.
// tcp_store_server_impl.h says how it all fits.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "ddp/error.h"
#include "store/lost_ranks.h"
#include "store/tcp_store_server_impl.h"
#include "util/log.h"

namespace ddp {

using detail::cat;
using detail::Clock;
using detail::Fd;
using detail::LogLevel;
namespace wire = detail::wire;
namespace torch_wire = detail::torch_wire;

namespace {

// A client whose unread replies pile up past this (a PyTorch watcher that stopped reading, say)
// loses its connection rather than the server's memory.
constexpr std::size_t kMaxPendingOutput = 4 * wire::kMaxFrameBytes;

// "address:port" of a peer, for log lines.
std::string describe(const sockaddr_storage& addr) {
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

}  // namespace

// ---- The event loop and connections.

TCPStoreServer::Impl::Impl(std::uint16_t port, std::string job_id, std::uint64_t generation)
    : job_id_(std::move(job_id)), generation_(generation) {
  detail::raise_open_file_limit();
  // Accept queues for a rendezvous storm of 65,536 ranks: one queue holds net.core.somaxconn
  // (4096 by default), and a SYN that finds its queue full costs its client a second.
  listeners_ = detail::listen_on_shared(port, 65536);
  for (const auto& l : listeners_) detail::set_nonblocking(l.get());
  port_ = detail::local_port(listeners_.front().get());
  epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
  wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll_ || !wake_) throw IOError(cat("store server: cannot create epoll or eventfd: ", std::strerror(errno)));
  for (const auto& l : listeners_) watch(l.get(), EPOLLIN);
  watch(wake_.get(), EPOLLIN);
  thread_ = std::thread([this] { run(); });
}

TCPStoreServer::Impl::~Impl() {
  stop_.store(true);
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
  thread_.join();
}

void TCPStoreServer::Impl::watch(int fd, std::uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void TCPStoreServer::Impl::rewatch(Client& c) {
  const bool want_out = c.out_pos < c.out.size();
  if (want_out == c.watching_out) return;  // most replies go out at once: no system call
  c.watching_out = want_out;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want_out ? std::uint32_t{EPOLLOUT} : 0u);
  ev.data.fd = c.fd.get();
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

void TCPStoreServer::Impl::run() {
  std::vector<epoll_event> events(256);
  while (!stop_.load()) {
    int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      detail::log(LogLevel::Error, "store server: epoll_wait failed: ", std::strerror(errno));
      break;
    }
    // While connections pour in, take them before every batch: behind a batch of requests the
    // listener may come up only every few batches, and a full accept queue costs a client a
    // second (its SYN is dropped and sent again).
    if (accepting_) accept_all();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (is_listener(fd)) {
        accept_from(fd);
      } else if (fd == wake_.get()) {
        std::uint64_t value;
        [[maybe_unused]] auto r = ::read(wake_.get(), &value, sizeof value);
      } else {
        on_event(fd, events[i].events);
      }
    }
    expire();
    reap();
  }
  // Shutting down: close every client (they see the server go away).
  clients_.clear();
  num_clients_.store(0);
}

int TCPStoreServer::Impl::next_timeout_ms() const {
  const auto earliest = keys_.next_deadline();
  if (earliest == KeySpace::kNoDeadline) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(earliest - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60'000));
}

bool TCPStoreServer::Impl::is_listener(int fd) const {
  return std::any_of(listeners_.begin(), listeners_.end(), [fd](const detail::Fd& l) { return l.get() == fd; });
}

void TCPStoreServer::Impl::accept_all() {
  accepting_ = false;
  for (const auto& l : listeners_) accept_from(l.get());
}

void TCPStoreServer::Impl::accept_from(int listener) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        detail::log(LogLevel::Error, "store server: out of file descriptors; raise `ulimit -n` (", clients_.size(),
                    " clients connected)");
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
    accepting_ = true;
  }
}

TCPStoreServer::Impl::Client* TCPStoreServer::Impl::find(int fd) {
  auto it = clients_.find(fd);
  return it == clients_.end() || !alive(*it->second) ? nullptr : it->second.get();
}

void TCPStoreServer::Impl::on_event(int fd, std::uint32_t events) {
  Client* client = find(fd);
  if (!client) return;
  Client& c = *client;
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
        // A short read took all there was: epoll (level-triggered) reports the rest, or the end
        // of the stream, next time; a second recv would only say EAGAIN.
        if (static_cast<std::size_t>(n) < sizeof chunk) break;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      // EOF or error. What arrived before it still counts (a goodbye, say); then the peer is gone.
      // Requests queued behind a parked wait, or left unread by a closing connection, are not a
      // truncated message.
      const std::string reason = n == 0 ? "" : std::strerror(errno);
      process(c);
      if (!alive(c)) return;
      if (!c.in.empty() && (c.state == State::Handshake || c.state == State::Ready)) {
        drop(c, cat("the connection closed in the middle of a message (", c.in.size(),
                    " bytes of an unfinished request)"));
      } else {
        close_client(c, reason);
      }
      return;
    }
    process(c);
  }
}

bool TCPStoreServer::Impl::process(Client& c) {
  if (c.protocol == Protocol::Unknown) {
    switch (torch_wire::classify_opening(c.in)) {
      case torch_wire::Opening::NeedMore: return true;
      case torch_wire::Opening::Ddp:
        c.in.erase(0, wire::kPreamble.size());
        c.protocol = Protocol::Ddp;
        break;
      case torch_wire::Opening::Torch:  // no handshake
        c.protocol = Protocol::Torch;
        c.dialect = torch_wire::Dialect::V1_13;
        c.state = State::Ready;
        break;
      case torch_wire::Opening::TorchValidated:
        c.protocol = Protocol::Torch;
        c.dialect = torch_wire::Dialect::Validated;
        break;
      case torch_wire::Opening::Unknown:
        return drop(c, cat("neither a ddp nor a PyTorch store client: the connection began with ",
                           detail::quote(c.in.substr(0, 16))));
    }
  }
  return c.protocol == Protocol::Ddp ? process_ddp(c) : process_torch(c);
}

bool TCPStoreServer::Impl::drop(Client& c, const std::string& reason) {
  std::string who;
  if (c.protocol == Protocol::Torch) who = cat(" (", torch_wire::to_string(c.dialect), " client)");
  if (c.rank >= 0) who = cat(" (rank ", c.rank, ")");
  detail::log(LogLevel::Warn, "store server: closing the connection from ", c.peer, who, ": ", reason);
  close_client(c, reason);
  return false;
}

void TCPStoreServer::Impl::send(Client& c, std::string_view bytes) {
  if (!alive(c)) return;
  if (c.out.size() - c.out_pos + bytes.size() > kMaxPendingOutput) {
    drop(c, cat("it does not read its replies (", c.out.size() - c.out_pos, " bytes are waiting)"));
    return;
  }
  c.out.append(bytes.data(), bytes.size());
  flush(c);
}

bool TCPStoreServer::Impl::flush(Client& c) {
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
    if (c.state == State::Closing) {
      close_client(c, "");
      return false;
    }
  }
  rewatch(c);
  return true;
}

void TCPStoreServer::Impl::close_client(Client& c, const std::string& reason) {
  if (!alive(c)) return;
  const bool on_purpose = c.state == State::Closing;  // a rank in it has said bye
  c.state = State::Dead;
  keys_.drop(c.fd.get());
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);  // the fd closes in reap()
  dead_.push_back(c.fd.get());
  if (c.rank < 0 || on_purpose) return;
  // The process died or its connection broke: leave a record every survivor can read.
  detail::log(LogLevel::Info, "store server: rank ", c.rank, " (pid ", c.pid, " on ", c.host,
              ") closed its connection without a goodbye");
  apply(keys_.set(detail::lost_rank_key(static_cast<int>(c.rank)),
                  cat("pid ", c.pid, " on ", c.host, (reason.empty() ? std::string() : ": " + reason))));
}

void TCPStoreServer::Impl::reap() {
  if (dead_.empty()) return;
  for (int fd : dead_) clients_.erase(fd);
  dead_.clear();
  num_clients_.store(clients_.size());
}

// ---- What the key space asks for.

void TCPStoreServer::Impl::apply(KeySpace::Effects effects) {
  if (effects.notice) notify_watchers(*effects.notice);
  if (!effects.answers.empty()) release(std::move(effects.answers));
}

void TCPStoreServer::Impl::release(std::vector<KeySpace::Answer> answers) {
  for (auto& a : answers) {
    Client* c = find(a.client);
    if (!c || c->state != State::Parked) continue;
    c->state = State::Ready;
    answer(*c, std::move(a));
  }
  // Then the requests that arrived while they were parked (which may change keys in turn).
  for (const auto& a : answers) {
    Client* c = find(a.client);
    if (c && c->state == State::Ready) process(*c);
  }
}

void TCPStoreServer::Impl::wait(Client& c, KeySpace::Want want, std::vector<std::string> keys,
                                Clock::time_point deadline) {
  if (auto now = keys_.wait(c.fd.get(), want, std::move(keys), deadline)) {
    answer(c, std::move(*now));
  } else {
    c.state = State::Parked;
  }
}

void TCPStoreServer::Impl::answer(Client& c, KeySpace::Answer answer) {
  if (c.protocol == Protocol::Ddp) {
    answer_ddp(c, std::move(answer));
  } else {
    answer_torch(c);
  }
}

// Answers ddp waits whose deadline passed (a PyTorch client keeps its own timeout).
void TCPStoreServer::Impl::expire() {
  auto expired = keys_.expire(Clock::now());
  if (!expired.empty()) release(std::move(expired));
}

TCPStoreServer::TCPStoreServer(std::uint16_t port, std::string job_id, std::uint64_t generation)
    : impl_(std::make_unique<Impl>(port, std::move(job_id), generation)) {}
TCPStoreServer::~TCPStoreServer() = default;
std::uint16_t TCPStoreServer::port() const { return impl_->port(); }
const std::string& TCPStoreServer::job_id() const { return impl_->job_id(); }
std::size_t TCPStoreServer::num_clients() const { return impl_->num_clients(); }

}  // namespace ddp
