// The TCPStore client: one blocking connection, one request at a time.
#include "ddp/tcp_store.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "ddp/error.h"
#include "net/socket.h"
#include "store/wire.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;
using detail::Clock;
namespace wire = detail::wire;

namespace {
// Extra time a client waits for the server's own timeout reply before calling the server dead.
constexpr auto kReplyGrace = std::chrono::seconds(10);
}  // namespace

std::string default_job_id() {
  for (const char* name : {"DDP_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* value = std::getenv(name);
    if (value && *value) return value;
  }
  return {};
}

class TCPStore::Connection {
 public:
  Connection(const TCPStoreOptions& options)
      : peer_(cat("the store at ", options.host, ":", options.port)) {
    const auto deadline = Clock::now() + options.timeout;
    fd_ = detail::connect_with_retry(options.host, options.port, deadline, "the store");
    detail::send_all(fd_.get(), wire::kPreamble, deadline, peer_);
    wire::Request hello;
    hello.op = wire::Op::Hello;
    hello.job_id = options.job_id;
    hello.number = options.rank;
    hello.pid = ::getpid();
    hello.host = detail::local_hostname();
    wire::Response response = call(hello, deadline);
    if (response.status == wire::Status::Refused) {
      throw MismatchError(cat(peer_, " belongs to job ", detail::quote(response.value),
                              ", but this process is part of job ", detail::quote(options.job_id),
                              ". Two jobs share one MASTER_ADDR:MASTER_PORT: give each job its own "
                              "port, or check DDP_JOB_ID / TORCHELASTIC_RUN_ID."));
    }
    expect(response, wire::Status::Ok, "hello");
  }

  ~Connection() {
    // A goodbye tells the server that this rank leaves on purpose (it is not "lost").
    try {
      wire::Request bye;
      bye.op = wire::Op::Bye;
      detail::send_all(fd_.get(), wire::encode(bye), Clock::now() + std::chrono::seconds(1), peer_);
    } catch (...) {
    }
  }

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
      throw PeerLostError(cat(wire::to_string(request.op), ": lost the connection to ", peer_, " (",
                              e.what(), "). The process hosting the store (rank 0 or the "
                              "launcher) has probably exited or crashed; look at its output first."));
    }
  }

  void expect(const wire::Response& response, wire::Status status, std::string_view op) {
    if (response.status == status) return;
    if (response.status == wire::Status::Error) throw InvalidArgument(response.value);
    fail("unexpected reply");
    throw IOError(cat(op, ": unexpected reply from ", peer_));
  }

  const std::string& peer() const { return peer_; }

 private:
  // After a failure the stream may be out of step with the server: refuse further use.
  void fail(const std::string& reason) {
    broken_ = true;
    broken_reason_ = reason;
  }

  std::string peer_;
  detail::Fd fd_;
  bool broken_ = false;
  std::string broken_reason_;
};

namespace {

TCPStoreOptions with_defaults(TCPStoreOptions options) {
  if (options.job_id.empty()) options.job_id = default_job_id();
  return options;
}

void check_key(const std::string& key) {
  if (key.size() > kMaxStoreKeyBytes) {
    throw InvalidArgument(cat("store key of ", key.size(), " bytes exceeds the limit of ", kMaxStoreKeyBytes));
  }
}

void check_value(const std::string& key, const std::string& value) {
  check_key(key);
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
    server_ = std::make_shared<TCPStoreServer>(options_.port, options_.job_id);
    options_.port = server_->port();
  }
  connection_ = std::make_unique<Connection>(options_);
}

TCPStore::~TCPStore() = default;

std::shared_ptr<Store> TCPStore::clone() {
  auto copy = std::shared_ptr<TCPStore>(new TCPStore(options_, server_));
  copy->set_timeout(timeout_);
  return copy;
}

void TCPStore::set(const std::string& key, const std::string& value) {
  check_value(key, value);
  wire::Request q{wire::Op::Set, key, value};
  std::lock_guard lock(mutex_);
  connection_->expect(connection_->call(q, Clock::now() + timeout_), wire::Status::Ok, "set");
}

std::string TCPStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key);
  wire::Request q{wire::Op::Get, key};
  q.number = timeout.count();
  std::lock_guard lock(mutex_);
  auto response = connection_->call(q, Clock::now() + timeout + kReplyGrace);
  if (response.status == wire::Status::Timeout) {
    throw TimeoutError(cat("store get(", detail::quote(key), ") timed out after ",
                           detail::format_duration(timeout), " waiting for the key at ",
                           options_.host, ":", options_.port,
                           ". The process that should set it has not: it may have failed, be "
                           "slower than the timeout, or belong to a different world size."));
  }
  connection_->expect(response, wire::Status::Value, "get");
  return std::move(response.value);
}

std::int64_t TCPStore::add(const std::string& key, std::int64_t delta) {
  check_key(key);
  wire::Request q{wire::Op::Add, key};
  q.number = delta;
  std::lock_guard lock(mutex_);
  auto response = connection_->call(q, Clock::now() + timeout_);
  connection_->expect(response, wire::Status::Number, "add");
  return response.number;
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  check_value(key, expected);
  check_value(key, desired);
  wire::Request q{wire::Op::CompareSet, key, expected, desired};
  std::lock_guard lock(mutex_);
  auto response = connection_->call(q, Clock::now() + timeout_);
  connection_->expect(response, wire::Status::Value, "compare_set");
  return std::move(response.value);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) check_key(key);
  wire::Request q{wire::Op::Check};
  q.keys = keys;
  std::lock_guard lock(mutex_);
  auto response = connection_->call(q, Clock::now() + timeout_);
  connection_->expect(response, wire::Status::Number, "check");
  return response.number != 0;
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const auto& key : keys) check_key(key);
  wire::Request q{wire::Op::Wait};
  q.keys = keys;
  q.number = timeout.count();
  std::lock_guard lock(mutex_);
  auto response = connection_->call(q, Clock::now() + timeout + kReplyGrace);
  if (response.status == wire::Status::Timeout) {
    std::vector<std::string> quoted;
    for (const auto& key : response.keys) quoted.push_back(detail::quote(key));
    throw TimeoutError(cat("store wait timed out after ", detail::format_duration(timeout),
                           " at ", options_.host, ":", options_.port, "; still missing: ",
                           detail::join(quoted), ". The processes that should set them have not."));
  }
  connection_->expect(response, wire::Status::Ok, "wait");
}

bool TCPStore::delete_key(const std::string& key) {
  check_key(key);
  wire::Request q{wire::Op::Delete, key};
  std::lock_guard lock(mutex_);
  auto response = connection_->call(q, Clock::now() + timeout_);
  connection_->expect(response, wire::Status::Number, "delete_key");
  return response.number != 0;
}

std::int64_t TCPStore::num_keys() {
  wire::Request q{wire::Op::NumKeys};
  std::lock_guard lock(mutex_);
  auto response = connection_->call(q, Clock::now() + timeout_);
  connection_->expect(response, wire::Status::Number, "num_keys");
  return response.number;
}

}  // namespace ddp
