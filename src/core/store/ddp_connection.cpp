// A TCPStore client's connection in ddp's protocol: preamble, hello (job id, generation, rank),
// then one framed request and its response at a time (wire.h).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "store/connection.h"
#include "store/wire.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

class DdpConnection final : public StoreConnection {
 public:
  explicit DdpConnection(const TCPStoreOptions& options)
      : StoreConnection(cat("the store at ", options.host, ":", options.port), cat(options.host, ":", options.port)) {
    const auto start = Clock::now();
    const auto deadline = start + options.timeout;
    wire::Response response;
    for (auto backoff = std::chrono::milliseconds(10);;
         backoff = std::min(backoff * 2, std::chrono::milliseconds(500))) {
      fd_ = connect_with_retry(options.host, options.port, deadline, "the store");
      wire::Request hello;
      hello.op = wire::Op::Hello;
      hello.job_id = options.job_id;
      hello.generation = options.generation;
      hello.number = options.rank;
      hello.pid = ::getpid();
      hello.host = local_hostname();
      try {
        send_bytes(wire::kPreamble, deadline);
        response = call(hello, deadline);
      } catch (const Error&) {
        // The connection broke before the server answered hello: a server on its way out (a
        // previous init's, shutting down) or not quite up. Try again until the deadline.
        if (Clock::now() + backoff >= deadline) throw;
        disconnect();
        std::this_thread::sleep_for(backoff);
        continue;
      }
      if (response.status != wire::Status::Later) break;
      // The previous init's store, on its way out: wait for the new one on the same port.
      disconnect();
      if (Clock::now() + backoff >= deadline) {
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
        throw TimeoutError(cat(peer_, " still belonged to an earlier init_process_group of this job (generation ",
                               response.value, ", this process is at ", options.generation, ") after ",
                               format_duration(waited),
                               ". Rank 0 has not started the new store: is it still running the previous "
                               "group, or did it skip init_process_group?"));
      }
      std::this_thread::sleep_for(backoff);
    }
    if (response.status == wire::Status::Refused) {
      throw MismatchError(cat(peer_, " belongs to job ", quote(response.value), ", but this process is part of job ",
                              quote(options.job_id),
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
      send_bytes(wire::encode(bye), Clock::now() + std::chrono::seconds(1));
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
    if (response.status == wire::Status::Timeout) throw get_timed_out(key, timeout);
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
    if (response.status == wire::Status::Timeout) throw wait_timed_out(response.keys, timeout);
    expect(response, wire::Status::Ok, "wait");
  }

  bool has_multi_get() const override { return true; }

  std::vector<std::string> multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    wire::Request q{wire::Op::MultiGet};
    q.keys = keys;
    q.number = timeout.count();
    auto response = call(q, Clock::now() + timeout + kReplyGrace);
    if (response.status == wire::Status::Timeout) throw wait_timed_out(response.keys, timeout, "multi_get");
    expect(response, wire::Status::Values, "multi_get");
    if (response.values.size() != keys.size()) {
      unexpected_reply("multi_get", cat(" (", response.values.size(), " values for ", keys.size(), " keys)"));
    }
    return std::move(response.values);
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
  // Sends one request frame and reads its response frame.
  wire::Response call(const wire::Request& request, Clock::time_point deadline) {
    return exchange(wire::to_string(request.op), [&] {
      send_bytes(wire::encode(request), deadline);
      char header[4];
      read(header, 4, deadline);
      std::uint32_t size = 0;
      std::memcpy(&size, header, 4);
      if (size > wire::kMaxFrameBytes) throw IOError(cat(peer_, " sent an oversized reply"));
      std::string frame(4 + size, '\0');
      std::memcpy(frame.data(), header, 4);
      read(frame.data() + 4, size, deadline);
      wire::Response response;
      std::size_t consumed = 0;
      std::string error;
      if (wire::parse(frame, response, consumed, error) != wire::Parse::Complete) {
        throw IOError(cat(peer_, " sent a malformed reply: ", error));
      }
      return response;
    });
  }

  // The status the request expects; an `error` reply is the server's InvalidArgument.
  void expect(const wire::Response& response, wire::Status status, std::string_view op) {
    if (response.status == status) return;
    if (response.status == wire::Status::Error) throw InvalidArgument(response.value);
    unexpected_reply(op);
  }
};

}  // namespace

std::unique_ptr<StoreConnection> connect_ddp(const TCPStoreOptions& options) {
  return std::make_unique<DdpConnection>(options);
}

}  // namespace ddp::detail
