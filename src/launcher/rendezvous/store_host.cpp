#include "rendezvous/store_host.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool is_local_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), "0", &hints, &list) != 0) return false;
  bool local = false;
  for (addrinfo* a = list; a && !local; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    local = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return local;
}

void check_resolves(const std::string& host, const std::string& source) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc == 0) {
    ::freeaddrinfo(list);
    return;
  }
  throw InvalidArgument(
      cat(source, " names the store's host ", detail::quote(host),
          ", which does not resolve on this "
          "machine (",
          rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc),
          "): neither ddprun nor its workers could reach the job's store there. Give an IP address "
          "(e.g. --master_addr=127.0.0.1 on one machine), or make the name resolve (/etc/hosts, DNS)."));
}

std::unique_ptr<TCPStoreServer> host_store(int port, const std::string& run_id, const std::string& port_flag) {
  try {
    return std::make_unique<TCPStoreServer>(static_cast<std::uint16_t>(port), run_id);
  } catch (const IOError& e) {
    throw InvalidArgument(cat("cannot host the job's store on port ", port, ": ", e.what(),
                              ". Another program (perhaps another job) is using it: pick a free port with ", port_flag,
                              ", or use --standalone for a single-node job on a free port."));
  }
}

std::shared_ptr<TCPStore> connect_store(const std::string& host, int port, const std::string& run_id, int rank,
                                        Clock::time_point deadline, const std::function<void()>& check_interrupt) {
  for (;;) {
    if (check_interrupt) check_interrupt();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    TCPStoreOptions options;
    options.host = host;
    options.port = static_cast<std::uint16_t>(port);
    options.job_id = run_id;
    options.rank = rank;
    options.timeout = std::clamp<std::chrono::milliseconds>(left, 100ms, 1000ms);
    try {
      auto store = std::make_shared<TCPStore>(options);
      store->set_timeout(60s);  // a reply to a request that does not block
      return store;
    } catch (const TimeoutError& e) {
      if (Clock::now() >= deadline) {
        throw TimeoutError(cat("cannot reach the job's store at ", host, ":", port, " (", e.what(),
                               "). The first node's ddprun hosts it: start it, and check the address "
                               "(--master_addr/--master_port or --rdzv_endpoint), the firewall and that every node "
                               "uses the same --rdzv_id."));
      }
    }
  }
}

}  // namespace ddp::launcher
