// ddp::TCPStore: the rendezvous store of a job, served over TCP by one process (rank 0, or the
// launcher) on a background thread, with every process a client. The wire protocol is described
// in docs/STORE_PROTOCOL.md.
//
// Jobs do not mix: each client presents a job id and a server with a different one refuses it.
// Liveness: a client tells the server its rank; when a rank's connection closes without a
// goodbye (the process died), the server records it under "__ddp/lost/<rank>" so that any
// survivor can say which rank was lost.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ddp/store.h"

namespace ddp {

// Largest value a store accepts (the server closes a connection that sends more).
inline constexpr std::size_t kMaxStoreValueBytes = std::size_t{64} << 20;
// Largest key.
inline constexpr std::size_t kMaxStoreKeyBytes = std::size_t{64} << 10;

class TCPStoreServer;

struct TCPStoreOptions {
  std::string host = "127.0.0.1";  // where clients connect (the server listens on every address)
  std::uint16_t port = 29500;      // with is_server, 0 picks a free port: read it from port()
  bool is_server = false;          // host the server in this process (on a background thread)
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;  // connect and blocking calls
  std::string job_id;  // empty: $DDP_JOB_ID, else $TORCHELASTIC_RUN_ID, else none (accept any)
  int rank = -1;       // this client's rank, for lost-rank records; -1: not a rank (a launcher)
};

class TCPStore : public Store {
 public:
  // Starts the server when options.is_server, then connects, retrying with backoff until the
  // timeout. Throws IOError when the port is in use, TimeoutError naming host:port and what to
  // check when no server answers in time, MismatchError when the server belongs to another job.
  explicit TCPStore(TCPStoreOptions options);
  // Says goodbye to the server (a clean exit is not a lost rank) and stops an owned server.
  ~TCPStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
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

 private:
  class Connection;
  TCPStore(TCPStoreOptions options, std::shared_ptr<TCPStoreServer> server);

  TCPStoreOptions options_;
  std::shared_ptr<TCPStoreServer> server_;  // set when this process hosts the server
  std::mutex mutex_;                        // one request at a time on the connection
  std::unique_ptr<Connection> connection_;
};

// The server alone (what the launcher runs). Serves until destroyed.
class TCPStoreServer {
 public:
  // Listens on every address at `port` (0: a free one). Throws IOError naming the port when it
  // is in use. `job_id` empty: accept clients of any job.
  TCPStoreServer(std::uint16_t port, std::string job_id);
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
