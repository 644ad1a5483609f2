// The TCPStore server: the event loop, connections, the key space, and ddp's protocol. PyTorch's
// protocol is served by tcp_store_server_torch.cpp; tcp_store_server_impl.h says how it all fits.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

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
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (c.out_pos < c.out.size() ? std::uint32_t{EPOLLOUT} : 0u);
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

int TCPStoreServer::Impl::next_timeout_ms() const {
  auto earliest = Clock::time_point::max();
  for (int fd : parked_) earliest = std::min(earliest, clients_.at(fd)->deadline);
  if (earliest == Clock::time_point::max()) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(earliest - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60'000));
}

void TCPStoreServer::Impl::accept_all() {
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

void TCPStoreServer::Impl::on_event(int fd, std::uint32_t events) {
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
      // Requests queued behind a parked wait are not a truncated message.
      const std::string reason = n == 0 ? "" : std::strerror(errno);
      process(c);
      if (!c.dead && !c.in.empty() && !c.parked) {
        drop(c, cat("the connection closed in the middle of a message (", c.in.size(), " bytes of an unfinished request)"));
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
      case torch_wire::Opening::NeedMore:
        return true;
      case torch_wire::Opening::Ddp:
        c.in.erase(0, wire::kPreamble.size());
        c.protocol = Protocol::Ddp;
        break;
      case torch_wire::Opening::Torch:
        c.protocol = Protocol::Torch;
        c.dialect = torch_wire::Dialect::V1_13;
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
  if (c.dead) return;
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
    if (c.closing) {
      close_client(c, "");
      return false;
    }
  }
  rewatch(c);
  return true;
}

void TCPStoreServer::Impl::close_client(Client& c, const std::string& reason) {
  if (c.dead) return;
  c.dead = true;
  if (c.parked) unpark(c);
  if (c.watching) {
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      it->second.erase(c.fd.get());
      it = it->second.empty() ? watchers_.erase(it) : std::next(it);
    }
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);  // the fd closes in reap()
  dead_.push_back(&c);
  if (!c.greeted || c.rank < 0) return;
  --connections_of_rank_[c.rank];
  if (c.bye) return;
  // The process died or its connection broke: leave a record every survivor can read.
  detail::log(LogLevel::Info, "store server: rank ", c.rank, " (pid ", c.pid, " on ", c.host,
              ") closed its connection without a goodbye");
  write(detail::lost_rank_key(static_cast<int>(c.rank)),
        cat("pid ", c.pid, " on ", c.host, (reason.empty() ? std::string() : ": " + reason)));
}

void TCPStoreServer::Impl::reap() {
  if (dead_.empty()) return;
  for (auto it = clients_.begin(); it != clients_.end();) {
    it = it->second->dead ? clients_.erase(it) : std::next(it);
  }
  dead_.clear();
  num_clients_.store(clients_.size());
}

// ---- ddp's protocol (wire.h).

bool TCPStoreServer::Impl::process_ddp(Client& c) {
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

bool TCPStoreServer::Impl::handle(Client& c, const wire::Request& q) {
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
    if (generation_ != 0 && q.generation > generation_) {
      // A client of the job's next init reached this store before it shut down: it retries.
      c.closing = true;
      reply(c, {wire::Status::Later, std::to_string(generation_)});
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
      reply(c, {wire::Status::Ok});
      write(q.key, q.value);
      return !c.dead;
    case wire::Op::Get:
    case wire::Op::Wait:
      wait_for(c, q.op == wire::Op::Get ? Parked::DdpGet : Parked::DdpWait,
               q.op == wire::Op::Get ? std::vector<std::string>{q.key} : q.keys,
               Clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(q.number, 0)));
      return !c.dead;
    case wire::Op::Add:
      try {
        auto change = begin_change(q.key);
        std::int64_t value = detail::apply_add(data_, q.key, q.number);
        reply(c, {wire::Status::Number, {}, value});
        end_change(q.key, change);
      } catch (const Error& e) {
        reply(c, {wire::Status::Error, e.what()});
      }
      return !c.dead;
    case wire::Op::CompareSet: {
      bool changed = false;
      auto change = begin_change(q.key);
      auto value = detail::apply_compare_set(data_, q.key, q.value, q.value2, changed);
      reply(c, {wire::Status::Value, std::move(value)});
      if (changed) end_change(q.key, change);
      return !c.dead;
    }
    case wire::Op::Check:
      reply(c, {wire::Status::Number, {}, all_present(q.keys) ? 1 : 0});
      return true;
    case wire::Op::Delete:
      reply(c, {wire::Status::Number, {}, erase(q.key) ? 1 : 0});
      return !c.dead;
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

// ---- The key space, shared by both protocols.

bool TCPStoreServer::Impl::all_present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
}

TCPStoreServer::Impl::Change TCPStoreServer::Impl::begin_change(const std::string& key) const {
  Change change;
  if (!watchers_.count(key)) return change;
  change.watched = true;
  auto it = data_.find(key);
  change.existed = it != data_.end();
  if (change.existed) change.old_value = it->second;
  return change;
}

void TCPStoreServer::Impl::end_change(const std::string& key, const Change& change) {
  auto it = data_.find(key);
  if (change.watched) {
    using torch_wire::WatchEvent;
    const bool exists = it != data_.end();
    const auto event = !exists ? WatchEvent::KeyDeleted : change.existed ? WatchEvent::KeyUpdated : WatchEvent::KeyCreated;
    const std::string bytes =
        torch_wire::encode_watch_event(event, key, change.old_value, exists ? std::string_view(it->second) : "");
    const auto watching = watchers_[key];  // a copy: a send may close a watcher
    for (int fd : watching) {
      auto found = clients_.find(fd);
      if (found != clients_.end()) send(*found->second, bytes);
    }
  }
  if (it != data_.end()) wake(key);
}

void TCPStoreServer::Impl::write(const std::string& key, std::string value) {
  auto change = begin_change(key);
  data_[key] = std::move(value);
  end_change(key, change);
}

bool TCPStoreServer::Impl::erase(const std::string& key) {
  auto change = begin_change(key);
  if (!data_.erase(key)) return false;
  end_change(key, change);
  return true;
}

void TCPStoreServer::Impl::wait_for(Client& c, Parked kind, std::vector<std::string> keys, Clock::time_point deadline) {
  c.parked_kind = kind;
  c.parked_keys = std::move(keys);
  if (try_answer(c)) return;
  c.parked = true;
  c.deadline = deadline;
  parked_.insert(c.fd.get());
  for (const auto& key : c.parked_keys) waiters_[key].insert(c.fd.get());
}

bool TCPStoreServer::Impl::try_answer(Client& c) {
  if (!all_present(c.parked_keys)) return false;
  switch (c.parked_kind) {
    case Parked::DdpGet:
      reply(c, {wire::Status::Value, data_.at(c.parked_keys.front())});
      break;
    case Parked::DdpWait:
      reply(c, {wire::Status::Ok});
      break;
    case Parked::TorchWait:
      send(c, torch_wire::encode_wait(torch_wire::WaitReply::StopWaiting));
      break;
  }
  return true;
}

void TCPStoreServer::Impl::unpark(Client& c) {
  for (const auto& key : c.parked_keys) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) continue;
    it->second.erase(c.fd.get());
    if (it->second.empty()) waiters_.erase(it);
  }
  parked_.erase(c.fd.get());
  c.parked = false;
}

void TCPStoreServer::Impl::wake(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<int> fds(it->second.begin(), it->second.end());
  for (int fd : fds) {
    auto found = clients_.find(fd);
    if (found == clients_.end()) continue;
    Client& c = *found->second;
    if (c.dead || !c.parked || !try_answer(c)) continue;
    unpark(c);
    process(c);  // requests that arrived while it was parked
  }
}

void TCPStoreServer::Impl::expire_parked() {
  const auto now = Clock::now();
  std::vector<int> expired;
  for (int fd : parked_) {
    if (clients_.at(fd)->deadline <= now) expired.push_back(fd);
  }
  for (int fd : expired) {
    Client& c = *clients_.at(fd);
    wire::Response response{wire::Status::Timeout};
    for (const auto& key : c.parked_keys) {
      if (!data_.count(key)) response.keys.push_back(key);
    }
    unpark(c);
    reply(c, response);
    process(c);
  }
}

TCPStoreServer::TCPStoreServer(std::uint16_t port, std::string job_id, std::uint64_t generation)
    : impl_(std::make_unique<Impl>(port, std::move(job_id), generation)) {}
TCPStoreServer::~TCPStoreServer() = default;
std::uint16_t TCPStoreServer::port() const { return impl_->port(); }
const std::string& TCPStoreServer::job_id() const { return impl_->job_id(); }
std::size_t TCPStoreServer::num_clients() const { return impl_->num_clients(); }

}  // namespace ddp
