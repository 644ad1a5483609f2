// store_bench: the rendezvous store under tens of thousands of connections (bench/run_store.py
// runs it beside PyTorch's TCPStore; docs/BENCHMARKS.md). Three roles:
//
//   store_bench serve [--port P]
//       A ddp TCPStoreServer. Prints "ready PORT PID", serves until stdin closes.
//   store_bench clients --port P --protocol ddp|ddp-multi|torch --first R --count K --total N --source IP
//       K connections from source address IP (one per rank R..R+K-1 of N), driven by one epoll
//       thread. Once "go" arrives on stdin, each connects and does what a rank does at
//       rendezvous: set addr/<rank>, add 1 to "count" (the arrival that makes it N sets "go"),
//       wait for "go", then get 4 peers' addr/<rank + 1..4>; with ddp-multi, one multi_get of
//       "go" and the 4 peers' keys does the wait and the gets. One request in flight per
//       connection. Prints "done T ERRORS RETRIES" (T: CLOCK_MONOTONIC ns when its last
//       connection finished), keeps the connections open until stdin closes.
//   store_bench probe --port P --protocol ddp|torch
//       ddp's own TCPStore client getting one key, once a millisecond, until stdin closes.
//       Prints "T LATENCY" (ns) per get.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ddp/tcp_store.h"
#include "net/socket.h"
#include "store/torch_wire.h"
#include "store/wire.h"

namespace {

namespace wire = ddp::detail::wire;
namespace torch_wire = ddp::detail::torch_wire;

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "store_bench: %s\n", what.c_str());
  std::exit(1);
}

std::map<std::string, std::string> flags(int argc, char** argv, int from) {
  std::map<std::string, std::string> out;
  for (int i = from; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0) die(std::string("unexpected argument ") + argv[i]);
    out[argv[i] + 2] = argv[i + 1];
  }
  return out;
}

void wait_for_eof() {
  std::string line;
  while (std::getline(std::cin, line)) {
  }
}

// ---- clients

enum Step { Connecting, Hello, SetAddr, Add, SetGo, WaitGo, GetPeer0, GetPeer1, GetPeer2, GetPeer3, Done };

struct Conn {
  int fd = -1;
  int rank = 0;
  int step = Connecting;
  std::string out;
  std::size_t out_pos = 0;
  std::string in;
  bool watching_out = true;
};

class Clients {
 public:
  Clients(std::map<std::string, std::string> f)
      : port_(static_cast<std::uint16_t>(std::stoi(f.at("port")))),
        torch_(f.at("protocol") == "torch"),
        multi_(f.at("protocol") == "ddp-multi"),
        first_(std::stoi(f.at("first"))),
        total_(std::stoi(f.at("total"))),
        source_(f.at("source")) {
    conns_.resize(static_cast<std::size_t>(std::stoi(f.at("count"))));
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  }

  void run() {
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      conns_[i].rank = first_ + static_cast<int>(i);
      start(i);
    }
    std::vector<epoll_event> events(1024);
    while (done_ < conns_.size()) {
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 1000);
      for (int e = 0; e < n; ++e) on_event(events[e].data.u64, events[e].events);
    }
    std::printf("done %lld %d %d\n", static_cast<long long>(now_ns()), errors_, retries_);
    std::fflush(stdout);
  }

 private:
  void start(std::size_t i) {
    Conn& c = conns_[i];
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) die(std::string("socket: ") + std::strerror(errno) + " (raise the open file limit)");
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, source_.c_str(), &local.sin_addr);
    if (::bind(c.fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      die("bind " + source_ + ": " + std::strerror(errno));
    }
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in server{};
    server.sin_family = AF_INET;
    server.sin_port = htons(port_);
    ::inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
    c.step = Connecting;
    c.watching_out = true;
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&server), sizeof server) != 0 && errno != EINPROGRESS) {
      die(std::string("connect: ") + std::strerror(errno));
    }
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN;
    ev.data.u64 = i;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &ev);
  }

  void on_event(std::size_t i, std::uint32_t events) {
    Conn& c = conns_[i];
    if (c.step == Done) return;
    if (c.step == Connecting) {
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0) {  // refused (a full backlog): try again
        ::close(c.fd);
        ++retries_;
        start(i);
        return;
      }
      if (!(events & EPOLLOUT)) return;
      if (!torch_) c.out += wire::kPreamble;
      next(c, torch_ ? SetAddr : Hello);
    }
    if (events & EPOLLOUT) flush(c);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
      char buffer[4096];
      for (;;) {
        const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
        if (n > 0) {
          c.in.append(buffer, static_cast<std::size_t>(n));
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        fail(c, n == 0 ? "the server closed the connection" : std::strerror(errno));
        return;
      }
      while (c.step != Done && answered(c)) {
      }
    }
    rewatch(c, i);
  }

  // Watches for EPOLLOUT only while output waits (a connection starts watching it for connect()).
  void rewatch(Conn& c, std::size_t i) {
    const bool want_out = c.out_pos < c.out.size();
    if (c.step == Done || want_out == c.watching_out) return;
    c.watching_out = want_out;
    epoll_event ev{};
    ev.events = EPOLLIN | (want_out ? EPOLLOUT : 0u);
    ev.data.u64 = i;
    ::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void fail(Conn& c, const std::string& why) {
    if (errors_++ < 5) std::fprintf(stderr, "store_bench: rank %d at step %d: %s\n", c.rank, c.step, why.c_str());
    finish(c);
  }

  void finish(Conn& c) {
    c.step = Done;
    ++done_;
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);  // stays open until stdin closes
  }

  std::string peer_key(const Conn& c, int k) const { return "addr/" + std::to_string((c.rank + 1 + k) % total_); }

  // Queues the request of `step` (and, for PyTorch's set, which has no reply, the next one too).
  void next(Conn& c, int step) {
    c.step = step;
    if (step == Done) return finish(c);
    if (torch_) {
      torch_wire::Request q;
      switch (step) {
        case SetAddr:
          q.query = torch_wire::Query::Set, q.key = "addr/" + std::to_string(c.rank), q.value = "127.0.0.1:1";
          break;
        case Add: q.query = torch_wire::Query::Add, q.key = "count", q.number = 1; break;
        case SetGo: q.query = torch_wire::Query::Set, q.key = "go", q.value = "1"; break;
        case WaitGo: q.query = torch_wire::Query::Wait, q.keys = {"go"}; break;
        default: q.query = torch_wire::Query::Get, q.key = peer_key(c, step - GetPeer0); break;
      }
      c.out += torch_wire::encode(q, torch_wire::Dialect::V1_13);
      flush(c);
      if (step == SetAddr) return next(c, Add);
      if (step == SetGo) return next(c, WaitGo);
      return;
    }
    wire::Request q;
    switch (step) {
      case Hello: q.op = wire::Op::Hello, q.number = -1, q.pid = ::getpid(), q.host = "bench"; break;
      case SetAddr: q.op = wire::Op::Set, q.key = "addr/" + std::to_string(c.rank), q.value = "127.0.0.1:1"; break;
      case Add: q.op = wire::Op::Add, q.key = "count", q.number = 1; break;
      case SetGo: q.op = wire::Op::Set, q.key = "go", q.value = "1"; break;
      case WaitGo:
        if (multi_) {
          q.op = wire::Op::MultiGet, q.number = 600'000;
          q.keys = {"go"};
          for (int k = 0; k < 4; ++k) q.keys.push_back(peer_key(c, k));
        } else {
          q.op = wire::Op::Get, q.key = "go", q.number = 600'000;
        }
        break;
      default: q.op = wire::Op::Get, q.key = peer_key(c, step - GetPeer0), q.number = 600'000; break;
    }
    c.out += wire::encode(q);
    flush(c);
  }

  void flush(Conn& c) {
    while (c.out_pos < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n <= 0) return;
      c.out_pos += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.out_pos = 0;
  }

  // Consumes the reply to the request in flight, if it has arrived, and sends the next request.
  bool answered(Conn& c) {
    std::int64_t number = 0;
    if (torch_) {
      std::size_t need = c.step == Add ? 8 : c.step == WaitGo ? 1 : 0;
      if (need) {
        if (c.in.size() < need) return false;
        if (need == 8) std::memcpy(&number, c.in.data(), 8);
        c.in.erase(0, need);
      } else {
        std::string value;
        std::size_t consumed = 0;
        std::string error;
        const auto parsed = torch_wire::parse_bytes(c.in, value, consumed, error);
        if (parsed == wire::Parse::NeedMore) return false;
        if (parsed != wire::Parse::Complete) return fail(c, error), false;
        c.in.erase(0, consumed);
      }
    } else {
      wire::Response r;
      std::size_t consumed = 0;
      std::string error;
      const auto parsed = wire::parse(c.in, r, consumed, error);
      if (parsed == wire::Parse::NeedMore) return false;
      if (parsed != wire::Parse::Complete) return fail(c, error), false;
      c.in.erase(0, consumed);
      if (r.status == wire::Status::Error || r.status == wire::Status::Refused || r.status == wire::Status::Timeout) {
        return fail(c, "the server answered " + std::to_string(static_cast<int>(r.status)) + ": " + r.value), false;
      }
      number = r.number;
    }
    switch (c.step) {
      case Hello: next(c, SetAddr); break;
      case SetAddr: next(c, Add); break;
      case Add: next(c, number == total_ ? SetGo : WaitGo); break;
      case SetGo: next(c, WaitGo); break;
      case WaitGo: next(c, multi_ ? Done : GetPeer0); break;
      default: next(c, c.step + 1); break;  // GetPeer0..3 -> ... Done
    }
    return true;
  }

  std::uint16_t port_;
  bool torch_;
  bool multi_;  // the wait and the 4 gets as one multi_get
  int first_;
  int total_;
  std::string source_;
  int epoll_ = -1;
  std::vector<Conn> conns_;
  std::size_t done_ = 0;
  int errors_ = 0;
  int retries_ = 0;
};

int clients(std::map<std::string, std::string> f) {
  Clients c(std::move(f));
  std::string line;
  if (!std::getline(std::cin, line) || line != "go") die("expected \"go\" on stdin");
  c.run();
  wait_for_eof();
  return 0;
}

int serve(std::map<std::string, std::string> f) {
  ddp::TCPStoreServer server(static_cast<std::uint16_t>(std::stoi(f.count("port") ? f.at("port") : "0")), "");
  std::printf("ready %d %d\n", server.port(), ::getpid());
  std::fflush(stdout);
  wait_for_eof();
  return 0;
}

int probe(std::map<std::string, std::string> f) {
  ddp::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::stoi(f.at("port")));
  options.protocol = f.at("protocol") == "torch" ? ddp::StoreProtocol::Torch : ddp::StoreProtocol::Ddp;
  options.timeout = std::chrono::seconds(120);
  ddp::TCPStore store(options);
  store.set("probe", "value");
  std::atomic<bool> stop{false};
  std::thread eof([&] {
    wait_for_eof();
    stop = true;
  });
  std::string out;
  while (!stop) {
    const auto start = now_ns();
    store.get("probe");
    const auto end = now_ns();
    out += std::to_string(start) + " " + std::to_string(end - start) + "\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  eof.join();
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: store_bench serve|clients|probe --flag value ...");
  const std::string role = argv[1];
  auto f = flags(argc, argv, 2);
  try {
    if (role == "serve") return serve(f);
    if (role == "clients") return clients(f);
    if (role == "probe") return probe(f);
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("unknown role " + role);
}
