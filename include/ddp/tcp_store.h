// ddp::TCPStore: the rendezvous store of a job, served over TCP by one process (rank 0, or the
// launcher) on a background thread, with every process a client. The wire protocol is described
// in docs/STORE_PROTOCOL.md.
//
// Jobs do not mix: each client presents a job id and a server with a different one refuses it.
// Liveness: a client tells the server its rank; when a rank's connection closes without a
// goodbye (the process died), the server records it under "__ddp/lost/<rank>" so that any
// survivor can say which rank was lost.
//
// PyTorch interoperability, both ways:
//  - TCPStoreServer also serves torch.distributed.TCPStore clients (PyTorch 1.13's protocol and
//    its successors', up to the VALIDATE-first protocol of PyTorch 2.x) on the same
//    port and key space, told apart from ddp clients by their first bytes. They carry no job id and no rank: they are
//    accepted whatever the server's job id, and are never recorded as lost.
//  - A TCPStore with protocol StoreProtocol::Torch is a client of a PyTorch 1.13 TCPStore server
//    (the one torchrun's agent hosts). Like PyTorch's client it puts "/" before every key, so it
//    sees the keys a Python torch.distributed.TCPStore client sees.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "ddp/store.h"

namespace ddp {

// Largest value a store accepts (the server closes a connection that sends more).
inline constexpr std::size_t kMaxStoreValueBytes = std::size_t{64} << 20;
// Largest key.
inline constexpr std::size_t kMaxStoreKeyBytes = std::size_t{64} << 10;

class TCPStoreServer;
namespace detail {
class StoreConnection;  // one connection in one protocol (src/core/store/connection.h)
}

// The protocol a TCPStore client speaks to its server.
enum class StoreProtocol {
  // ddp's own, to a ddp TCPStoreServer: job ids, lost-rank records, timeouts kept by the server.
  Ddp,
  // PyTorch 1.13's TCPStore protocol, to a torch.distributed.TCPStore server (or a ddp server,
  // which speaks both). It has no job id (options.job_id is ignored), no rank (options.rank is
  // ignored: a rank that dies is not recorded as lost) and no error replies: the server closes
  // the connection on a bad request. A get or wait that times out reconnects, because the server
  // cannot be told to stop waiting. Servers that expect PyTorch 2.x's VALIDATE handshake are
  // not supported: they close the connection, and the constructor throws IOError saying so.
  Torch,
};

std::string_view to_string(StoreProtocol protocol);

struct TCPStoreOptions {
  std::string host = "127.0.0.1";  // where clients connect (the server listens on every address)
  std::uint16_t port = 29500;      // with is_server, 0 picks a free port: read it from port()
  bool is_server = false;          // host the server in this process (on a background thread)
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;  // connect and blocking calls
  std::string job_id;  // empty: $DDP_JOB_ID, else $TORCHELASTIC_RUN_ID, else none (accept any)
  int rank = -1;       // this client's rank, for lost-rank records; -1: not a rank (a launcher)
  StoreProtocol protocol = StoreProtocol::Ddp;  // what this client speaks (the server speaks both)
  // Which init_process_group of the job this store serves (0: any). A client that reaches a server
  // of an earlier generation (one still shutting down after destroy_process_group) waits for its
  // successor instead of joining a store about to vanish. ddp's protocol only.
  std::uint64_t generation = 0;
};

// The protocol of a launcher's store (the store every rank joins as a client when
// TORCHELASTIC_USE_AGENT_STORE=True), from the value of $DDP_STORE_PROTOCOL:
//   "ddp"          -> Ddp    (ddprun hosts a ddp TCPStoreServer and exports DDP_STORE_PROTOCOL=ddp)
//   unset or empty -> Torch  (torchrun, which sets no such variable, hosts a PyTorch TCPStore)
//   "torch"        -> Torch
// Throws InvalidArgument naming the variable and the accepted values for anything else.
StoreProtocol agent_store_protocol(const std::optional<std::string>& ddp_store_protocol);

class TCPStore : public Store {
 public:
  // Starts the server when options.is_server, then connects, retrying with backoff until the
  // timeout. Throws IOError when the port is in use, TimeoutError naming host:port and what to
  // check when no server answers in time, MismatchError when the server belongs to another job
  // (Ddp protocol), IOError when the server does not answer in PyTorch 1.13's protocol (Torch).
  explicit TCPStore(TCPStoreOptions options);
  // Says goodbye to the server (a clean exit is not a lost rank) and stops an owned server.
  ~TCPStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::multi_get;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;
  // A new connection to the same server (the server stays owned by this object).
  std::shared_ptr<Store> clone() override;

  const std::string& host() const { return options_.host; }
  std::uint16_t port() const { return options_.port; }
  const std::string& job_id() const { return options_.job_id; }
  StoreProtocol protocol() const { return options_.protocol; }

 private:
  TCPStore(TCPStoreOptions options, std::shared_ptr<TCPStoreServer> server);

  TCPStoreOptions options_;
  std::shared_ptr<TCPStoreServer> server_;  // set when this process hosts the server
  std::mutex mutex_;                        // one request at a time on the connection
  std::unique_ptr<detail::StoreConnection> connection_;
};

// The server alone (what the launcher runs). Serves until destroyed.
class TCPStoreServer {
 public:
  // Listens on every address at `port` (0: a free one). Throws IOError naming the port when it
  // is in use. `job_id` empty: accept clients of any job.
  TCPStoreServer(std::uint16_t port, std::string job_id, std::uint64_t generation = 0);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  std::uint16_t port() const;
  const std::string& job_id() const;
  // Clients connected now.
  std::size_t num_clients() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The job id a store uses when none is given: $DDP_JOB_ID, else $TORCHELASTIC_RUN_ID, else "".
std::string default_job_id();

}  // namespace ddp
