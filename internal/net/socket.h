// Thin RAII wrappers over POSIX TCP sockets, with deadlines on every blocking call.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::detail {

using Clock = std::chrono::steady_clock;

// An owned file descriptor; closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Connects to host:port, retrying refused or unreachable attempts with backoff until `deadline`.
// `what` names the peer for messages ("the store"). A host that does not resolve is logged at
// once (a warning) and retried too. Throws TimeoutError with host:port, the time waited, the last
// error and what to check.
Fd connect_with_retry(const std::string& host, std::uint16_t port, Clock::time_point deadline, std::string_view what);

// A listening socket on every address (IPv6 dual-stack, else IPv4) at `port` (0: any free port).
// Throws IOError naming the port when it is in use.
Fd listen_on(std::uint16_t port, int backlog = 4096);

// Listening sockets that share one port (SO_REUSEPORT), as listen_on's, enough for `connections`
// to arrive at once: the kernel spreads new connections over their accept queues, each capped at
// net.core.somaxconn (4096 by default), and drops a SYN that finds its queue full, which costs
// that client 1 s and then 3 s more. A port anyone listens on is still an IOError naming it.
std::vector<Fd> listen_on_shared(std::uint16_t port, int connections);

// How many accept queues of `queue_cap` connections hold `connections` (at least 1, at most
// kMaxAcceptQueues; a cap unknown, 0 or less: the most).
inline constexpr int kMaxAcceptQueues = 16;
int accept_queues_for(int connections, int queue_cap);

// The local port of a bound socket.
std::uint16_t local_port(int fd);

// Writes all of `data`; throws IOError (peer gone) or TimeoutError at the deadline.
void send_all(int fd, std::string_view data, Clock::time_point deadline, std::string_view peer);

// Reads exactly `size` bytes into `out`. Returns false on a clean EOF before any byte; throws
// IOError on errors or EOF mid-message, TimeoutError at the deadline.
bool recv_exact(int fd, char* out, std::size_t size, Clock::time_point deadline, std::string_view peer);

void set_nonblocking(int fd);
void set_nodelay(int fd);

// This machine's host name.
std::string local_hostname();

// The local IP address this machine would use to reach `host` (the interface routing there).
// Empty when `host` cannot be resolved.
std::string local_address_toward(const std::string& host);

// Whether `host` (a name or an address) resolves to at least one address.
bool resolves(const std::string& host);

// True for "localhost", 127.x.y.z and ::1.
bool is_loopback_host(const std::string& host);

// Raises the soft limit on open files to the hard limit, so that a server can hold many clients.
void raise_open_file_limit();

}  // namespace ddp::detail
