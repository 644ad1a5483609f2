#include "net/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>

#include "ddp/error.h"
#include "util/log.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
}

// Waits until fd is ready for `events`; throws TimeoutError at the deadline.
void wait_ready(int fd, short events, Clock::time_point deadline, std::string_view peer, std::string_view doing) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = remaining_ms(deadline);
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return;
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw IOError(cat("poll failed while ", doing, " ", peer, ": ", errno_text(errno)));
    if (ms == 0) throw TimeoutError(cat("timed out ", doing, " ", peer));
  }
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Fd connect_with_retry(const std::string& host, std::uint16_t port, Clock::time_point deadline, std::string_view what) {
  const auto start = Clock::now();
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error = "no attempt made";
  bool told_unresolved = false;
  for (;;) {
    AddrInfo info;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const std::string service = std::to_string(port);
    int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &info.list);
    if (rc != 0) {
      last_error = cat("cannot resolve host ", quote(host), ": ", gai_strerror(rc));
      if (!told_unresolved) {
        // Said at once, not only at the deadline (30 minutes by default): a name that does not
        // resolve (localhost without /etc/hosts, a typo) rarely starts resolving later.
        log(LogLevel::Warn, "connecting to ", what, " at ", host, ":", port, ": ", last_error,
            "; retrying until the timeout (",
            format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())),
            "). Use an IP address (e.g. MASTER_ADDR=127.0.0.1 on one machine) or add the name to /etc/hosts.");
        told_unresolved = true;
      }
    } else {
      for (addrinfo* a = info.list; a; a = a->ai_next) {
        Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd) {
          last_error = errno_text(errno);
          continue;
        }
        // Non-blocking connect so that an unreachable host cannot hold us past the deadline.
        set_nonblocking(fd.get());
        rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          pollfd p{fd.get(), POLLOUT, 0};
          int ms = std::min(remaining_ms(deadline), 5000);
          rc = ::poll(&p, 1, ms);
          if (rc == 1) {
            int error = 0;
            socklen_t len = sizeof error;
            ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
            rc = error == 0 ? 0 : -1;
            errno = error;
          } else {
            rc = -1;
            errno = ETIMEDOUT;
          }
        }
        if (rc == 0) {
          int flags = ::fcntl(fd.get(), F_GETFL, 0);
          ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
          set_nodelay(fd.get());
          return fd;
        }
        last_error = errno_text(errno);
      }
    }
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  throw TimeoutError(cat("could not connect to ", what, " at ", host, ":", port, " after ", format_duration(waited),
                         " (last error: ", last_error,
                         "). Check that the process hosting it (rank 0 or the launcher) is "
                         "running, that MASTER_ADDR and MASTER_PORT name it, and that no "
                         "firewall blocks the port."));
}

namespace {

// A socket bound to `port` on every address: dual-stack IPv6 where the machine has it, else IPv4
// (`family` 0 tries both; AF_INET6 or AF_INET takes that one). `share` sets SO_REUSEPORT.
// Returns the socket, or sets `error` to the bind's errno.
Fd bind_every_address(std::uint16_t port, bool share, int& family, int& error) {
  int one = 1, zero = 0;
  error = 0;
  auto bound = [&](int f) {
    Fd fd(::socket(f, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
      error = errno;
      return fd;
    }
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (share) ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    sockaddr_storage addr{};
    socklen_t len;
    if (f == AF_INET6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(port);
      len = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(port);
      len = sizeof *a;
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      error = errno;
      fd.reset();
    }
    return fd;
  };
  if (family != AF_INET) {
    Fd fd = bound(AF_INET6);
    if (fd || (error != EAFNOSUPPORT && error != EADDRNOTAVAIL) || family == AF_INET6) {
      if (fd) family = AF_INET6;
      return fd;
    }
  }
  Fd fd = bound(AF_INET);
  if (fd) family = AF_INET;
  return fd;
}

[[noreturn]] void throw_bind_error(std::uint16_t port, int error) {
  if (error == EADDRINUSE) {
    throw IOError(cat("port ", port,
                      " is already in use on this machine: another job, or an earlier run that "
                      "has not exited, holds it. Choose another port (MASTER_PORT, "
                      "--master_port) or let ddp pick a free one (port 0, ddprun --standalone)."));
  }
  throw IOError(cat("cannot bind port ", port, ": ", errno_text(error)));
}

void listen_or_throw(const Fd& fd, std::uint16_t port, int backlog) {
  if (::listen(fd.get(), backlog) != 0) throw IOError(cat("cannot listen on port ", port, ": ", errno_text(errno)));
}

// The kernel's cap on one listening socket's accept queue.
int somaxconn() {
  std::FILE* f = std::fopen("/proc/sys/net/core/somaxconn", "re");
  int value = 4096;  // Linux's default since 5.4
  if (f) {
    if (std::fscanf(f, "%d", &value) != 1) value = 4096;
    std::fclose(f);
  }
  return value;
}

}  // namespace

Fd listen_on(std::uint16_t port, int backlog) {
  int family = 0, error = 0;
  Fd fd = bind_every_address(port, false, family, error);
  if (!fd) throw_bind_error(port, error);
  listen_or_throw(fd, port, backlog);
  return fd;
}

int accept_queues_for(int connections, int queue_cap) {
  if (queue_cap <= 0) return kMaxAcceptQueues;
  return std::clamp((connections + queue_cap - 1) / queue_cap, 1, kMaxAcceptQueues);
}

std::vector<Fd> listen_on_shared(std::uint16_t port, int connections) {
  const int count = accept_queues_for(connections, somaxconn());
  // An exclusive bind first: it fails while anyone listens on the port, as listen_on does; the
  // shared sockets take the port it got (port 0 gives a free one) once it lets go. Another process
  // could take the port in that instant only by binding it with SO_REUSEPORT under this user:
  // then the shared binds fail too (a free port is tried again), unless it shares on purpose.
  for (int attempt = 0;; ++attempt) {
    int family = 0, error = 0;
    Fd probe = bind_every_address(port, false, family, error);
    if (!probe) throw_bind_error(port, error);
    const std::uint16_t chosen = local_port(probe.get());
    probe.reset();
    std::vector<Fd> out;
    for (int i = 0; i < count; ++i) {
      Fd fd = bind_every_address(chosen, true, family, error);
      if (!fd) break;
      listen_or_throw(fd, chosen, std::numeric_limits<int>::max());  // the kernel caps it at somaxconn
      out.push_back(std::move(fd));
    }
    if (static_cast<int>(out.size()) == count) return out;
    if (port != 0 || attempt == 3) throw_bind_error(chosen, error);
  }
}

std::uint16_t local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void send_all(int fd, std::string_view data, Clock::time_point deadline, std::string_view peer) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT, deadline, peer, "sending to");
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      throw IOError(cat("connection to ", peer, " broke while sending: ", errno_text(errno)));
    }
  }
}

bool recv_exact(int fd, char* out, std::size_t size, Clock::time_point deadline, std::string_view peer) {
  std::size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd, out + got, size - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      if (got == 0) return false;
      throw IOError(cat("connection to ", peer, " closed in the middle of a message"));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, deadline, peer, "waiting for a reply from");
    } else if (errno == EINTR) {
      continue;
    } else {
      throw IOError(cat("connection to ", peer, " broke while receiving: ", errno_text(errno)));
    }
  }
  return true;
}

std::string local_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

std::string local_address_toward(const std::string& host) {
  AddrInfo info;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(host.c_str(), "9", &hints, &info.list) != 0) return {};
  for (addrinfo* a = info.list; a; a = a->ai_next) {
    // A connected UDP socket sends nothing but makes the kernel pick the route and source address.
    Fd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* src = local.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, src, text, sizeof text)) return text;
  }
  return {};
}

bool resolves(const std::string& host) {
  AddrInfo info;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  return ::getaddrinfo(host.c_str(), nullptr, &hints, &info.list) == 0;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace ddp::detail
