// The job's store from ddprun's side: hosting it (on the node that does), deciding whether an
// endpoint is this machine, and connecting to it without going deaf to SIGINT/SIGTERM.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "ddp/tcp_store.h"

namespace ddp::launcher {

// True when `host` resolves to an address of this machine (a socket can be bound to it).
bool is_local_address(const std::string& host);

// Throws InvalidArgument when `host` does not resolve on this machine (getaddrinfo), naming it
// and `source` (the flag or variable it came from), before anything would wait on it.
void check_resolves(const std::string& host, const std::string& source);

// Starts the store on `port` (0: a free one) for job `run_id`. Throws InvalidArgument when the
// port is in use, saying which flag picks another.
std::unique_ptr<TCPStoreServer> host_store(int port, const std::string& run_id, const std::string& port_flag);

// Connects to the store at host:port as `rank` (agents: kAgentRankBase + node rank; -1 before
// the rendezvous), retrying until `deadline`, calling check_interrupt between tries. Throws
// TimeoutError naming the address and what to check, MismatchError for another job's store.
std::shared_ptr<TCPStore> connect_store(const std::string& host, int port, const std::string& run_id, int rank,
                                        std::chrono::steady_clock::time_point deadline,
                                        const std::function<void()>& check_interrupt);

}  // namespace ddp::launcher
