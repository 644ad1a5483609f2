// The TCPStore client: one blocking connection, one request at a time, in ddp's protocol or in
// PyTorch's (TCPStoreOptions::protocol).
#include "ddp/tcp_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "ddp/error.h"
#include "net/socket.h"
#include "store/torch_wire.h"
#include "store/wire.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;
using detail::Clock;
namespace wire = detail::wire;
namespace torch_wire = detail::torch_wire;

namespace {
// Extra time a client waits for the server's own timeout reply before calling the server dead.
constexpr auto kReplyGrace = std::chrono::seconds(10);

TimeoutError get_timed_out(const std::string& key, std::chrono::milliseconds timeout, const std::string& where) {
  return TimeoutError(cat("store get(", detail::quote(key), ") timed out after ", detail::format_duration(timeout),
                          " waiting for the key at ", where,
                          ". The process that should set it has not: it may have failed, be slower than the "
                          "timeout, or belong to a different world size."));
}

TimeoutError wait_timed_out(const std::vector<std::string>& missing, std::chrono::milliseconds timeout,
                            const std::string& where) {
  std::vector<std::string> quoted;
  for (const auto& key : missing) quoted.push_back(detail::quote(key));
  return TimeoutError(cat("store wait timed out after ", detail::format_duration(timeout), " at ", where,
                          "; still missing: ", detail::join(quoted), ". The processes that should set them have not."));
}

PeerLostError lost_connection(std::string_view op, const std::string& peer, const std::string& what) {
  return PeerLostError(cat(op, ": lost the connection to ", peer, " (", what,
                           "). The process hosting the store (rank 0 or the launcher) has probably exited or "
                           "crashed; look at its output first."));
}

}  // namespace

std::string default_job_id() {
  for (const char* name : {"DDP_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* value = std::getenv(name);
    if (value && *value) return value;
  }
  return {};
}

std::string_view to_string(StoreProtocol protocol) { return protocol == StoreProtocol::Ddp ? "ddp" : "torch"; }

StoreProtocol agent_store_protocol(const std::optional<std::string>& value) {
  if (!value || value->empty() || *value == "torch") return StoreProtocol::Torch;
  if (*value == "ddp") return StoreProtocol::Ddp;
  throw InvalidArgument(cat("DDP_STORE_PROTOCOL=", detail::quote(*value),
                            " is not a store protocol. Use \"ddp\" (ddprun exports it: its store is a ddp "
                            "TCPStoreServer) or \"torch\"; unset means torch (torchrun hosts a PyTorch TCPStore)."));
}

// One connection to the server, in one protocol. Not thread-safe: TCPStore serializes calls.
class detail::StoreConnection {
 public:
  virtual ~StoreConnection() = default;
  virtual void set(const std::string& key, const std::string& value, Clock::time_point deadline) = 0;
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual std::int64_t add(const std::string& key, std::int64_t delta, Clock::time_point deadline) = 0;
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                                  Clock::time_point deadline) = 0;
  virtual bool check(const std::vector<std::string>& keys, Clock::time_point deadline) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool delete_key(const std::string& key, Clock::time_point deadline) = 0;
  virtual std::int64_t num_keys(Clock::time_point deadline) = 0;
  // The longest key the protocol carries.
  virtual std::size_t max_key_bytes() const { return kMaxStoreKeyBytes; }
};

namespace {

// ddp's protocol: preamble, hello (job id, rank), then framed requests (wire.h).
class DdpConnection final : public detail::StoreConnection {
 public:
  explicit DdpConnection(const TCPStoreOptions& options)
      : peer_(cat("the store at ", options.host, ":", options.port)), where_(cat(options.host, ":", options.port)) {
    const auto start = Clock::now();
    const auto deadline = start + options.timeout;
    wire::Response response;
    for (auto backoff = std::chrono::milliseconds(10);; backoff = std::min(backoff * 2, std::chrono::milliseconds(500))) {
      fd_ = detail::connect_with_retry(options.host, options.port, deadline, "the store");
      wire::Request hello;
      hello.op = wire::Op::Hello;
      hello.job_id = options.job_id;
      hello.generation = options.generation;
      hello.number = options.rank;
      hello.pid = ::getpid();
      hello.host = detail::local_hostname();
      try {
        detail::send_all(fd_.get(), wire::kPreamble, deadline, peer_);
        response = call(hello, deadline);
      } catch (const Error&) {
        // The connection broke before the server answered hello: a server on its way out (a
        // previous init's, shutting down) or not quite up. Try again until the deadline.
        if (Clock::now() + backoff >= deadline) throw;
        fd_.reset();
        broken_ = false;
        std::this_thread::sleep_for(backoff);
        continue;
      }
      if (response.status != wire::Status::Later) break;
      // The previous init's store, on its way out: wait for the new one on the same port.
      fd_.reset();
      broken_ = false;
      if (Clock::now() + backoff >= deadline) {
        throw TimeoutError(cat(peer_, " still belonged to an earlier init_process_group of this job (generation ",
                               response.value, ", this process is at ", options.generation, ") after ",
                               detail::format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   Clock::now() - start)),
                               ". Rank 0 has not started the new store: is it still running the previous "
                               "group, or did it skip init_process_group?"));
      }
      std::this_thread::sleep_for(backoff);
    }
    if (response.status == wire::Status::Refused) {
      throw MismatchError(cat(peer_, " belongs to job ", detail::quote(response.value),
                              ", but this process is part of job ", detail::quote(options.job_id),
                              ". Two jobs share one MASTER_ADDR:MASTER_PORT: give each job its own "
                              "port, or check DDP_JOB_ID / TORCHELASTIC_RUN_ID."));
    }
    expect(response, wire::Status::Ok, "hello");
  }

  ~DdpConnection() override {
    // A goodbye tells the server that this rank leaves on purpose (it is not "lost").
    try {
      wire::Request bye;
      bye.op = wire::Op::Bye;
      detail::send_all(fd_.get(), wire::encode(bye), Clock::now() + std::chrono::seconds(1), peer_);
    } catch (...) {
    }
  }

  void set(const std::string& key, const std::string& value, Clock::time_point deadline) override {
    expect(call({wire::Op::Set, key, value}, deadline), wire::Status::Ok, "set");
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    wire::Request q{wire::Op::Get, key};
    q.number = timeout.count();
    auto response = call(q, Clock::now() + timeout + kReplyGrace);
    if (response.status == wire::Status::Timeout) throw get_timed_out(key, timeout, where_);
    expect(response, wire::Status::Value, "get");
    return std::move(response.value);
  }

  std::int64_t add(const std::string& key, std::int64_t delta, Clock::time_point deadline) override {
    wire::Request q{wire::Op::Add, key};
    q.number = delta;
    auto response = call(q, deadline);
    expect(response, wire::Status::Number, "add");
    return response.number;
  }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                          Clock::time_point deadline) override {
    auto response = call({wire::Op::CompareSet, key, expected, desired}, deadline);
    expect(response, wire::Status::Value, "compare_set");
    return std::move(response.value);
  }

  bool check(const std::vector<std::string>& keys, Clock::time_point deadline) override {
    wire::Request q{wire::Op::Check};
    q.keys = keys;
    auto response = call(q, deadline);
    expect(response, wire::Status::Number, "check");
    return response.number != 0;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    wire::Request q{wire::Op::Wait};
    q.keys = keys;
    q.number = timeout.count();
    auto response = call(q, Clock::now() + timeout + kReplyGrace);
    if (response.status == wire::Status::Timeout) throw wait_timed_out(response.keys, timeout, where_);
    expect(response, wire::Status::Ok, "wait");
  }

  bool delete_key(const std::string& key, Clock::time_point deadline) override {
    auto response = call({wire::Op::Delete, key}, deadline);
    expect(response, wire::Status::Number, "delete_key");
    return response.number != 0;
  }

  std::int64_t num_keys(Clock::time_point deadline) override {
    auto response = call({wire::Op::NumKeys}, deadline);
    expect(response, wire::Status::Number, "num_keys");
    return response.number;
  }

 private:
  wire::Response call(const wire::Request& request, Clock::time_point deadline) {
    if (broken_) throw PeerLostError(cat("the connection to ", peer_, " broke earlier: ", broken_reason_));
    try {
      detail::send_all(fd_.get(), wire::encode(request), deadline, peer_);
      char header[4];
      if (!detail::recv_exact(fd_.get(), header, 4, deadline, peer_)) {
        throw IOError(cat(peer_, " closed the connection"));
      }
      std::uint32_t size = 0;
      std::memcpy(&size, header, 4);
      if (size > wire::kMaxFrameBytes) throw IOError(cat(peer_, " sent an oversized reply"));
      std::string frame(4 + size, '\0');
      std::memcpy(frame.data(), header, 4);
      if (!detail::recv_exact(fd_.get(), frame.data() + 4, size, deadline, peer_)) {
        throw IOError(cat(peer_, " closed the connection"));
      }
      wire::Response response;
      std::size_t consumed = 0;
      std::string error;
      if (wire::parse(frame, response, consumed, error) != wire::Parse::Complete) {
        throw IOError(cat(peer_, " sent a malformed reply: ", error));
      }
      return response;
    } catch (const TimeoutError& e) {
      fail(e.what());
      throw TimeoutError(cat(wire::to_string(request.op), ": no reply from ", peer_,
                             " in time; the process hosting it may be stopped or overloaded"));
    } catch (const IOError& e) {
      fail(e.what());
      throw lost_connection(wire::to_string(request.op), peer_, e.what());
    }
  }

  void expect(const wire::Response& response, wire::Status status, std::string_view op) {
    if (response.status == status) return;
    if (response.status == wire::Status::Error) throw InvalidArgument(response.value);
    fail("unexpected reply");
    throw IOError(cat(op, ": unexpected reply from ", peer_));
  }

  // After a failure the stream may be out of step with the server: refuse further use.
  void fail(const std::string& reason) {
    broken_ = true;
    broken_reason_ = reason;
  }

  std::string peer_;
  std::string where_;
  detail::Fd fd_;
  bool broken_ = false;
  std::string broken_reason_;
};

// PyTorch 1.13's protocol (torch_wire.h). Keys get PyTorch's "/" prefix. A wait or get that times
// out closes the connection (the server forgets a wait when its connection closes; the protocol
// has no other way to cancel one) and the next call reconnects.
class TorchConnection final : public detail::StoreConnection {
 public:
  explicit TorchConnection(const TCPStoreOptions& options)
      : options_(options),
        peer_(cat("the PyTorch store at ", options.host, ":", options.port)),
        where_(cat(options.host, ":", options.port)) {
    connect(Clock::now() + options.timeout);
  }

  void set(const std::string& key, const std::string& value, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::Set, prefixed(key), value};
    call("set", deadline, [&](Clock::time_point d) { send(q, d); });
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    // As PyTorch's client: wait for the key, then get it.
    const auto deadline = Clock::now() + timeout;
    if (!wait_until({key}, deadline)) throw get_timed_out(key, timeout, where_);
    torch_wire::Request q{torch_wire::Query::Get, prefixed(key)};
    return call("get", deadline + kReplyGrace, [&](Clock::time_point d) {
      send(q, d);
      return read_bytes(d);
    });
  }

  std::int64_t add(const std::string& key, std::int64_t delta, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::Add, prefixed(key)};
    q.number = delta;
    try {
      return call("add", deadline, [&](Clock::time_point d) {
        send(q, d);
        return read_int64(d);
      });
    } catch (const PeerLostError&) {
      // A PyTorch server has no error reply: it closes the connection when the key holds
      // something that is not an integer. Tell that apart from a dead server.
      explain_failed_add(key, deadline);
      throw;
    }
  }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired,
                          Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::CompareSet, prefixed(key), expected, desired};
    return call("compare_set", deadline, [&](Clock::time_point d) {
      send(q, d);
      return read_bytes(d);
    });
  }

  bool check(const std::vector<std::string>& keys, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::Check};
    for (const auto& key : keys) q.keys.push_back(prefixed(key));
    const auto reply = call("check", deadline, [&](Clock::time_point d) {
      send(q, d);
      return read_u8(d);
    });
    if (reply > static_cast<std::uint8_t>(torch_wire::CheckReply::NotReady)) protocol_error("check", reply);
    return reply == static_cast<std::uint8_t>(torch_wire::CheckReply::Ready);
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    if (wait_until(keys, Clock::now() + timeout)) return;
    // Name the keys still missing, on a fresh connection (best effort: all of them otherwise).
    std::vector<std::string> missing;
    try {
      connect(Clock::now() + std::chrono::seconds(5));  // the server just answered: it accepts at once
      for (const auto& key : keys) {
        if (!check({key}, Clock::now() + std::chrono::seconds(5))) missing.push_back(key);
      }
    } catch (const Error&) {
      missing = keys;
    }
    throw wait_timed_out(missing, timeout, where_);
  }

  bool delete_key(const std::string& key, Clock::time_point deadline) override {
    torch_wire::Request q{torch_wire::Query::DeleteKey, prefixed(key)};
    return call("delete_key", deadline, [&](Clock::time_point d) {
             send(q, d);
             return read_int64(d);
           }) != 0;
  }

  std::int64_t num_keys(Clock::time_point deadline) override {
    return call("num_keys", deadline, [&](Clock::time_point d) {
      send({torch_wire::Query::GetNumKeys}, d);
      return read_int64(d);
    });
  }

  std::size_t max_key_bytes() const override { return kMaxStoreKeyBytes - torch_wire::kKeyPrefix.size(); }

 private:
  static std::string prefixed(const std::string& key) { return cat(torch_wire::kKeyPrefix, key); }

  // Connects and asks for the key count: a PyTorch 1.13 server (or a ddp one) answers; a 2.x
  // server closes the connection, since it expects a VALIDATE handshake first.
  void connect(Clock::time_point deadline) {
    fd_ = detail::connect_with_retry(options_.host, options_.port, deadline, "the store");
    broken_ = false;
    try {
      send({torch_wire::Query::GetNumKeys}, deadline);
      read_int64(deadline);
    } catch (const TimeoutError&) {
      fd_.reset();
      throw TimeoutError(cat(peer_, " accepted the connection but did not answer a PyTorch 1.13 TCPStore request in ",
                             detail::format_duration(options_.timeout),
                             ": it may be stopped, or not a PyTorch 1.13 TCPStore (newer PyTorch stores expect "
                             "another protocol). Under ddprun, DDP_STORE_PROTOCOL=ddp selects ddp's protocol."));
    } catch (const IOError& e) {
      fd_.reset();
      throw IOError(cat(peer_, " closed the connection at the first request (", e.what(),
                        "): it does not speak PyTorch 1.13's TCPStore protocol. Newer PyTorch stores (2.x "
                        "with the VALIDATE handshake) expect a handshake ddp does not send; launch with PyTorch "
                        "1.13's torchrun, or with ddprun (which exports DDP_STORE_PROTOCOL=ddp)."));
    }
  }

  // Runs one exchange, reconnecting first when an earlier timeout closed the connection. IO
  // failures become PeerLostError (and the connection stays broken), timeouts TimeoutError.
  template <typename F>
  std::invoke_result_t<F&, Clock::time_point> call(std::string_view op, Clock::time_point deadline, F&& exchange) {
    if (broken_) throw PeerLostError(cat("the connection to ", peer_, " broke earlier: ", broken_reason_));
    if (!fd_) connect(Clock::now() + options_.timeout);
    try {
      return exchange(deadline);
    } catch (const TimeoutError& e) {
      fail(e.what());
      throw TimeoutError(cat(op, ": no reply from ", peer_, " in time; the process hosting it may be stopped or overloaded"));
    } catch (const IOError& e) {
      fail(e.what());
      throw lost_connection(op, peer_, e.what());
    }
  }

  // Sends WAIT and reads STOP_WAITING. False at the deadline, with the connection closed.
  bool wait_until(const std::vector<std::string>& keys, Clock::time_point deadline) {
    torch_wire::Request q{torch_wire::Query::Wait};
    for (const auto& key : keys) q.keys.push_back(prefixed(key));
    if (!fd_ && !broken_) connect(Clock::now() + options_.timeout);  // a connect timeout is not a wait timeout
    call("wait", deadline, [&](Clock::time_point d) { send(q, d); });
    std::uint8_t reply = 0;
    try {
      reply = call("wait", deadline, [&](Clock::time_point d) { return read_u8(d); });
    } catch (const TimeoutError&) {
      fd_.reset();  // the server drops the parked wait with the connection
      broken_ = false;
      return false;
    }
    if (reply != static_cast<std::uint8_t>(torch_wire::WaitReply::StopWaiting)) protocol_error("wait", reply);
    return true;
  }

  // After an add lost its connection: reconnect, and when the key holds a non-integer, say so.
  // `deadline` is the add's own: a live server answers the probe at once.
  void explain_failed_add(const std::string& key, Clock::time_point deadline) {
    const std::string lost = broken_reason_;
    const auto probe = std::max(deadline, Clock::now() + std::chrono::seconds(2));
    std::string value;
    try {
      fd_.reset();
      broken_ = false;
      connect(std::min(deadline, Clock::now() + std::chrono::seconds(2)));
      if (!check({key}, probe)) return;
      torch_wire::Request q{torch_wire::Query::Get, prefixed(key)};
      value = call("get", probe, [&](Clock::time_point d) {
        send(q, d);
        return read_bytes(d);
      });
    } catch (const Error&) {
      fd_.reset();
      fail(lost);  // the server is gone: the connection stays broken, and the add's error stands
      return;
    }
    if (detail::parse_int(value)) return;
    throw InvalidArgument(cat("store add(", detail::quote(key), "): the key holds ", detail::quote(value),
                              ", not an integer counter (", peer_,
                              " closed the connection over it); use a key of its own for counters"));
  }

  void send(const torch_wire::Request& q, Clock::time_point deadline) {
    detail::send_all(fd_.get(), torch_wire::encode(q, torch_wire::Dialect::V1_13), deadline, peer_);
  }

  void read(char* out, std::size_t size, Clock::time_point deadline) {
    if (!detail::recv_exact(fd_.get(), out, size, deadline, peer_)) throw IOError(cat(peer_, " closed the connection"));
  }

  std::uint8_t read_u8(Clock::time_point deadline) {
    char c = 0;
    read(&c, 1, deadline);
    return static_cast<std::uint8_t>(c);
  }

  std::int64_t read_int64(Clock::time_point deadline) {
    std::int64_t v = 0;
    read(reinterpret_cast<char*>(&v), sizeof v, deadline);
    return v;
  }

  std::string read_bytes(Clock::time_point deadline) {
    std::string buffer(8, '\0');
    read(buffer.data(), 8, deadline);
    std::string value, error;
    std::size_t consumed = 0;
    auto result = torch_wire::parse_bytes(buffer, value, consumed, error);
    if (result == torch_wire::Parse::NeedMore) {
      std::uint64_t size = 0;
      std::memcpy(&size, buffer.data(), 8);
      buffer.resize(8 + size);
      read(buffer.data() + 8, size, deadline);
      result = torch_wire::parse_bytes(buffer, value, consumed, error);
    }
    if (result != torch_wire::Parse::Complete) throw IOError(cat(peer_, " sent a bad reply: ", error));
    return value;
  }

  [[noreturn]] void protocol_error(std::string_view op, std::uint8_t reply) {
    fail("unexpected reply");
    throw IOError(cat(op, ": unexpected reply ", static_cast<int>(reply), " from ", peer_));
  }

  void fail(const std::string& reason) {
    broken_ = true;
    broken_reason_ = reason;
  }

  TCPStoreOptions options_;
  std::string peer_;
  std::string where_;
  detail::Fd fd_;
  bool broken_ = false;
  std::string broken_reason_;
};

TCPStoreOptions with_defaults(TCPStoreOptions options) {
  if (options.job_id.empty()) options.job_id = default_job_id();
  return options;
}

void check_key(const std::string& key, std::size_t limit) {
  if (key.size() > limit) {
    throw InvalidArgument(cat("store key of ", key.size(), " bytes exceeds the limit of ", limit));
  }
}

void check_value(const std::string& key, const std::string& value, std::size_t key_limit) {
  check_key(key, key_limit);
  if (value.size() > kMaxStoreValueBytes) {
    throw InvalidArgument(cat("store value for ", detail::quote(key), " is ", value.size(),
                              " bytes; the limit is ", kMaxStoreValueBytes, " (64 MiB)"));
  }
}

}  // namespace

TCPStore::TCPStore(TCPStoreOptions options) : TCPStore(with_defaults(std::move(options)), nullptr) {}

TCPStore::TCPStore(TCPStoreOptions options, std::shared_ptr<TCPStoreServer> server)
    : options_(std::move(options)), server_(std::move(server)) {
  timeout_ = options_.timeout;
  if (options_.is_server && !server_) {
    server_ = std::make_shared<TCPStoreServer>(options_.port, options_.job_id, options_.generation);
    options_.port = server_->port();
  }
  if (options_.protocol == StoreProtocol::Torch) {
    connection_ = std::make_unique<TorchConnection>(options_);
  } else {
    connection_ = std::make_unique<DdpConnection>(options_);
  }
}

TCPStore::~TCPStore() = default;

std::shared_ptr<Store> TCPStore::clone() {
  auto copy = std::shared_ptr<TCPStore>(new TCPStore(options_, server_));
  copy->set_timeout(timeout_);
  return copy;
}

void TCPStore::set(const std::string& key, const std::string& value) {
  check_value(key, value, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  connection_->set(key, value, Clock::now() + timeout_);
}

std::string TCPStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->get(key, timeout);
}

std::int64_t TCPStore::add(const std::string& key, std::int64_t delta) {
  check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->add(key, delta, Clock::now() + timeout_);
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  check_value(key, expected, connection_->max_key_bytes());
  check_value(key, desired, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->compare_set(key, expected, desired, Clock::now() + timeout_);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->check(keys, Clock::now() + timeout_);
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const auto& key : keys) check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  connection_->wait(keys, timeout);
}

bool TCPStore::delete_key(const std::string& key) {
  check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->delete_key(key, Clock::now() + timeout_);
}

std::int64_t TCPStore::num_keys() {
  std::lock_guard lock(mutex_);
  return connection_->num_keys(Clock::now() + timeout_);
}

}  // namespace ddp
