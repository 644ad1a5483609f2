// The store's listening sockets: several accept queues on one port (listen_on_shared), so that a
// rendezvous storm larger than one queue (net.core.somaxconn) is not dropped.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ddp/error.h"
#include "net/socket.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using detail::Fd;

int somaxconn() {
  std::FILE* f = std::fopen("/proc/sys/net/core/somaxconn", "r");
  int value = 4096;
  if (f) {
    if (std::fscanf(f, "%d", &value) != 1) value = 4096;
    std::fclose(f);
  }
  return value;
}

int int_option(int fd, int level, int name) {
  int value = 0;
  socklen_t len = sizeof value;
  ::getsockopt(fd, level, name, &value, &len);
  return value;
}

// Connections waiting in a listener's accept queue, and the queue's cap (Linux reports them as a
// listener's tcpi_unacked and tcpi_sacked).
std::pair<int, int> accept_queue(int listener) {
  tcp_info info{};
  socklen_t len = sizeof info;
  ::getsockopt(listener, IPPROTO_TCP, TCP_INFO, &info, &len);
  return {static_cast<int>(info.tcpi_unacked), static_cast<int>(info.tcpi_sacked)};
}

Fd connect_nonblocking(std::uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  return fd;
}

// `count` connections to `port`, each started without waiting for it.
std::vector<Fd> connect_many(std::uint16_t port, int count) {
  std::vector<Fd> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(connect_nonblocking(port));
  return out;
}

int queued(const std::vector<Fd>& listeners) {
  int total = 0;
  for (const auto& l : listeners) total += accept_queue(l.get()).first;
  return total;
}

TEST(ListenOnShared, AcceptQueuesForTheConnections) {
  EXPECT_EQ(detail::accept_queues_for(65536, 4096), 16);
  EXPECT_EQ(detail::accept_queues_for(8192, 4096), 2);
  EXPECT_EQ(detail::accept_queues_for(8193, 4096), 3);
  EXPECT_EQ(detail::accept_queues_for(100, 4096), 1);
  EXPECT_EQ(detail::accept_queues_for(65536, 65535), 2);
  EXPECT_EQ(detail::accept_queues_for(1 << 20, 128), detail::kMaxAcceptQueues) << "capped";
  EXPECT_EQ(detail::accept_queues_for(65536, 0), detail::kMaxAcceptQueues) << "a cap not known";
}

TEST(ListenOnShared, EverySocketListensOnThePortItGot) {
  const auto listeners = detail::listen_on_shared(0, 65536);
  ASSERT_EQ(static_cast<int>(listeners.size()), detail::accept_queues_for(65536, somaxconn()));
  const std::uint16_t port = detail::local_port(listeners.front().get());
  EXPECT_NE(port, 0);
  for (const auto& l : listeners) {
    EXPECT_EQ(detail::local_port(l.get()), port);
    EXPECT_EQ(int_option(l.get(), SOL_SOCKET, SO_ACCEPTCONN), 1) << "listening";
    EXPECT_EQ(int_option(l.get(), SOL_SOCKET, SO_REUSEPORT), 1) << "sharing the port";
  }
}

TEST(ListenOnShared, APortAnyoneListensOnIsInUse) {
  auto expect_in_use = [](auto&& make, std::uint16_t port) {
    try {
      make();
      ADD_FAILURE() << "a second listener on port " << port;
    } catch (const IOError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("port " + std::to_string(port) + " is already in use"), std::string::npos) << message;
    }
  };
  // A plain listener holds the port: the shared ones may not join it.
  const Fd plain = detail::listen_on(0);
  const std::uint16_t plain_port = detail::local_port(plain.get());
  expect_in_use([&] { detail::listen_on_shared(plain_port, 8); }, plain_port);
  // A shared group holds the port: another group (another job's store) may not join it either,
  // although its sockets would be allowed to share it.
  const auto group = detail::listen_on_shared(0, 65536);
  const std::uint16_t group_port = detail::local_port(group.front().get());
  expect_in_use([&] { detail::listen_on_shared(group_port, 65536); }, group_port);
  expect_in_use([&] { detail::listen_on(group_port); }, group_port);
}

// A storm of connections larger than one accept queue: a single listener's queue stops at its
// cap (the kernel drops the rest's SYNs, and each of those clients waits a second to try again),
// while the shared listeners' queues hold every connection at once. Nothing is accepted here, so
// the queues show what the kernel kept.
TEST(ListenOnShared, AStormLargerThanOneQueueIsKeptWhole) {
  const int cap = somaxconn();
  const int storm = cap + 512;
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  if (cap > 16384 || files.rlim_cur < static_cast<rlim_t>(storm) * 2 + 256) {
    GTEST_SKIP() << "somaxconn " << cap << " and an open-file limit of " << files.rlim_cur
                 << " do not allow a storm past one queue here";
  }
  {
    const Fd single = detail::listen_on(0, cap);
    const auto clients = connect_many(detail::local_port(single.get()), storm);
    std::this_thread::sleep_for(200ms);  // loopback handshakes finish within the connects
    const auto [length, queue_cap] = accept_queue(single.get());
    EXPECT_EQ(queue_cap, cap);
    EXPECT_LE(length, cap + 1) << "one queue keeps at most its cap";
  }
  const auto listeners = detail::listen_on_shared(0, 65536);
  ASSERT_GE(listeners.size(), 2u);
  const auto clients = connect_many(detail::local_port(listeners.front().get()), storm);
  // Within the first SYN's retransmission time (1 s): only a connection never dropped is queued.
  const auto deadline = std::chrono::steady_clock::now() + 800ms;
  while (queued(listeners) < storm && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(queued(listeners), storm);
  int used = 0;
  for (const auto& l : listeners) used += accept_queue(l.get()).first > 0;
  EXPECT_GE(used, 2) << "the kernel spreads connections over the queues";
}

}  // namespace
}  // namespace ddp
