// store_rendezvous_bench: N ranks' rendezvous on one TCPStoreServer, each rank a thread with ddp's
// own TCPStore client (what a job's ranks do at init_process_group, without the processes):
// connect, set addr/<rank>, add 1 to "count" (the arrival that makes it N sets "go"), wait for
// "go", then get the addresses of ranks rank+1..rank+4. The server runs in a child process, so its
// CPU time is its own and each process holds N sockets (the open-file limit allows about 19,900
// connections here, not half that).
//
//   store_rendezvous_bench --clients N [--rounds R] [--timeout-s T] [--server process|thread]
//                          [--addresses K]
//
// --server thread hosts the server in this process instead, as rank 0 does (2 N sockets in one
// process; the CPU column then holds the server's time too). --addresses K spreads the ranks over
// the server's addresses 127.0.0.1 to 127.0.0.K, as ranks on K hosts: from one address to one port,
// each connect searches the ephemeral ports for a free one, which near 20,000 connections costs
// the clients more CPU than the whole server (docs/BENCHMARKS.md).
//
// Per round it prints the time from "go" to the last rank done, that per connection, and the CPU
// time of the server process and of the clients. It uses only ddp's public TCPStore API, so the
// same file builds against an earlier commit's library (bench/run_store_rendezvous.py runs both
// alternated: run it before and after every store change; docs/BENCHMARKS.md).
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/tcp_store.h"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "store_rendezvous_bench: %s\n", what.c_str());
  std::exit(1);
}

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// User plus system CPU seconds of a process (/proc/PID/stat, fields 14 and 15).
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(all.substr(all.rfind(')') + 2));
  std::string field;
  long long ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i >= 14) ticks += std::stoll(field);
  }
  return static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double self_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Server {
  pid_t pid = -1;
  std::uint16_t port = 0;
  int release_fd = -1;  // closing it ends the server
};

// The server in a child forked before any thread starts: it hosts a TCPStoreServer, writes its
// port, and serves until the parent closes the pipe.
Server start_server() {
  int ready[2], release[2];
  if (::pipe(ready) != 0 || ::pipe(release) != 0) die(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) die(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(ready[0]);
    ::close(release[1]);
    ddp::TCPStoreServer server(0, "");
    const std::uint16_t port = server.port();
    if (::write(ready[1], &port, sizeof port) != sizeof port) std::_Exit(1);
    char c;
    while (::read(release[0], &c, 1) > 0) {
    }
    std::_Exit(0);
  }
  ::close(ready[1]);
  ::close(release[0]);
  Server s;
  s.pid = pid;
  s.release_fd = release[1];
  if (::read(ready[0], &s.port, sizeof s.port) != sizeof s.port) die("the server process did not start");
  ::close(ready[0]);
  return s;
}

struct Round {
  double seconds = 0, server_cpu = 0, clients_cpu = 0;
  int errors = 0;
  std::string first_error;
};

struct Shared {
  int clients = 0;
  std::uint16_t port = 0;
  int addresses = 1;  // rank r connects to 127.0.0.(1 + r % addresses)
  std::chrono::milliseconds timeout{0};
  std::atomic<int> go{0};       // 1: start; the threads wait on it
  std::atomic<int> release{0};  // 1: every rank is done, close the connections
  std::atomic<int> done{0};
  std::atomic<int> errors{0};
  std::atomic<double> last_done{0};
  std::string first_error;
  std::atomic_flag error_taken = ATOMIC_FLAG_INIT;
};

struct Rank {
  Shared* shared;
  int rank;
};

void* rank_main(void* arg) {
  const Rank me = *static_cast<Rank*>(arg);
  Shared& s = *me.shared;
  s.go.wait(0);
  std::unique_ptr<ddp::TCPStore> store;
  try {
    ddp::TCPStoreOptions options;
    options.host = "127.0.0." + std::to_string(1 + me.rank % s.addresses);
    options.port = s.port;
    options.timeout = s.timeout;
    options.rank = me.rank;
    store = std::make_unique<ddp::TCPStore>(options);
    store->set("addr/" + std::to_string(me.rank), "10.0.0.1:" + std::to_string(20000 + me.rank));
    if (store->add("count", 1) == s.clients) store->set("go", "1");
    store->wait({"go"});
    for (int peer = 1; peer <= 4; ++peer) store->get("addr/" + std::to_string((me.rank + peer) % s.clients));
  } catch (const std::exception& e) {
    if (!s.error_taken.test_and_set()) s.first_error = e.what();
    s.errors.fetch_add(1);
  }
  const double t = now_s();
  double seen = s.last_done.load();
  while (t > seen && !s.last_done.compare_exchange_weak(seen, t)) {
  }
  s.done.fetch_add(1);
  s.done.notify_all();
  s.release.wait(0);  // keep the connection open until every rank is done, as a job does
  return nullptr;
}

Round run_round(int clients, int addresses, std::chrono::milliseconds timeout, bool in_process) {
  // In this process, as rank 0's init_process_group hosts it; or in a child of its own.
  std::unique_ptr<ddp::TCPStoreServer> local;
  Server server;
  if (in_process) {
    local = std::make_unique<ddp::TCPStoreServer>(0, "");
    server.pid = ::getpid();
    server.port = local->port();
  } else {
    server = start_server();
  }
  Shared s;
  s.clients = clients;
  s.addresses = addresses;
  s.port = server.port;
  s.timeout = timeout;
  std::vector<Rank> ranks(static_cast<std::size_t>(clients));
  std::vector<pthread_t> threads(static_cast<std::size_t>(clients));
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setstacksize(&attr, 256 << 10);
  for (int r = 0; r < clients; ++r) {
    ranks[r] = Rank{&s, r};
    if (const int rc = ::pthread_create(&threads[r], &attr, rank_main, &ranks[r]); rc != 0) {
      die("thread " + std::to_string(r) + ": " + std::strerror(rc));
    }
  }
  ::pthread_attr_destroy(&attr);
  const double server_cpu0 = cpu_seconds(server.pid), clients_cpu0 = self_cpu_seconds();
  const double start = now_s();
  s.go.store(1);
  s.go.notify_all();
  for (int d = s.done.load(); d < clients; d = s.done.load()) s.done.wait(d);
  Round out;
  out.seconds = s.last_done.load() - start;
  out.server_cpu = in_process ? 0 : cpu_seconds(server.pid) - server_cpu0;
  out.clients_cpu = self_cpu_seconds() - clients_cpu0;  // with the server's when it is in this process
  out.errors = s.errors.load();
  out.first_error = s.first_error;
  s.release.store(1);
  s.release.notify_all();
  for (pthread_t t : threads) ::pthread_join(t, nullptr);
  if (!in_process) {
    ::close(server.release_fd);
    int status = 0;
    ::waitpid(server.pid, &status, 0);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int clients = 8192, rounds = 3, timeout_s = 120, addresses = 1;
  bool in_process = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--clients") {
      clients = value;
    } else if (flag == "--rounds") {
      rounds = value;
    } else if (flag == "--timeout-s") {
      timeout_s = value;
    } else if (flag == "--addresses") {
      addresses = std::clamp(value, 1, 254);
    } else if (flag == "--server") {
      if (std::string(argv[i + 1]) != "process" && std::string(argv[i + 1]) != "thread") {
        die("--server is process (a child process, the default) or thread (in this process)");
      }
      in_process = std::string(argv[i + 1]) == "thread";
    } else {
      die("unknown flag " + flag + " (--clients N, --rounds R, --timeout-s T, --server process|thread, --addresses K)");
    }
  }
  if (clients < 5 || rounds < 1) die("--clients must be at least 5 and --rounds at least 1");
  // Each process holds `clients` sockets: raise the soft open-file limit to the hard one.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  const int files_needed = (in_process ? 2 * clients : clients) + 64;
  if (files.rlim_cur < static_cast<rlim_t>(files_needed)) {
    die("the open-file limit (" + std::to_string(files.rlim_cur) + ") is below " + std::to_string(files_needed) +
        ": lower --clients or raise ulimit -Hn");
  }
  std::printf("clients\tseconds\tus_per_connection\tserver_cpu_s\tclients_cpu_s\terrors\n");
  for (int round = 0; round < rounds; ++round) {
    const Round r = run_round(clients, addresses, std::chrono::seconds(timeout_s), in_process);
    std::printf("%d\t%.3f\t%.1f\t%.3f\t%.3f\t%d\n", clients, r.seconds, r.seconds * 1e6 / clients, r.server_cpu,
                r.clients_cpu, r.errors);
    std::fflush(stdout);
    if (r.errors > 0) std::fprintf(stderr, "store_rendezvous_bench: first error: %s\n", r.first_error.c_str());
  }
  return 0;
}
