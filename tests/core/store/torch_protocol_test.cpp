// The PyTorch TCPStore protocol at the byte level, without Python: ddp's server answering raw
// PyTorch requests (1.13's, and the 2.x VALIDATE dialect), watch_key events, each way a
// PyTorch-protocol connection gets closed (with the logged reason), and ddp's Torch-protocol
// client against our server and against scripted fake servers. The live tests against PyTorch
// itself are in torch_compat_test.cpp.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "net/socket.h"
#include "store/torch_wire.h"
#include "store_contract.h"
#include "util/strings.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;
namespace tw = detail::torch_wire;
using detail::cat;

TCPStoreOptions client_of(std::uint16_t port, StoreProtocol protocol = StoreProtocol::Ddp, std::string job = "") {
  TCPStoreOptions options;
  options.port = port;
  options.timeout = 20s;
  options.protocol = protocol;
  options.job_id = std::move(job);
  return options;
}

// A raw PyTorch-protocol connection, for bytes no honest client sends.
struct RawTorch {
  detail::Fd fd;
  explicit RawTorch(std::uint16_t port)
      : fd(detail::connect_with_retry("127.0.0.1", port, detail::Clock::now() + 5s, "test server")) {}
  void send(const std::string& bytes) { detail::send_all(fd.get(), bytes, detail::Clock::now() + 5s, "server"); }
  void send(const tw::Request& q, tw::Dialect dialect = tw::Dialect::V1_13) { send(tw::encode(q, dialect)); }
  std::string read(std::size_t n) {
    std::string out(n, '\0');
    if (!detail::recv_exact(fd.get(), out.data(), n, detail::Clock::now() + 5s, "server")) throw IOError("EOF");
    return out;
  }
  std::string read_bytes() {
    std::uint64_t size = 0;
    std::memcpy(&size, read(8).data(), 8);
    return read(size);
  }
  std::int64_t read_int64() {
    std::int64_t v = 0;
    std::memcpy(&v, read(8).data(), 8);
    return v;
  }
  // True when the server closes the connection within a few seconds.
  bool closed_by_server() {
    char c;
    try {
      while (detail::recv_exact(fd.get(), &c, 1, detail::Clock::now() + 5s, "server")) {
      }
      return true;
    } catch (const IOError&) {
      return true;
    } catch (const TimeoutError&) {
      return false;
    }
  }
  // Nothing arrives within `wait`.
  bool silent(std::chrono::milliseconds wait) {
    char c;
    try {
      detail::recv_exact(fd.get(), &c, 1, detail::Clock::now() + wait, "server");
      return false;
    } catch (const TimeoutError&) {
      return true;
    }
  }
};

tw::Request query(tw::Query q, std::string key = "", std::string value = "", std::string value2 = "") {
  tw::Request r;
  r.query = q;
  r.key = std::move(key);
  r.value = std::move(value);
  r.value2 = std::move(value2);
  return r;
}

tw::Request keys_query(tw::Query q, std::vector<std::string> keys) {
  tw::Request r = query(q);
  r.keys = std::move(keys);
  return r;
}

// A one-connection fake PyTorch server that runs `script` on the connection it accepts.
class FakeTorchServer {
 public:
  explicit FakeTorchServer(std::function<void(int fd)> script) : listener_(detail::listen_on(0)) {
    port_ = detail::local_port(listener_.get());
    thread_ = std::thread([this, script] {
      detail::Fd c(::accept(listener_.get(), nullptr, nullptr));
      try {
        script(c.get());
      } catch (const std::exception&) {  // the client went away first
      }
      listener_.reset();  // nobody else may connect
    });
  }
  ~FakeTorchServer() { thread_.join(); }
  std::uint16_t port() const { return port_; }

  // Reads one request of the 1.13 dialect from `fd`.
  static tw::Request read_request(int fd) {
    std::string bytes;
    for (;;) {
      tw::Request q;
      std::size_t consumed = 0;
      std::string error;
      auto r = tw::parse(bytes, tw::Dialect::V1_13, q, consumed, error);
      if (r == tw::Parse::Complete) return q;
      if (r != tw::Parse::NeedMore) throw IOError(error);
      char c;
      if (!detail::recv_exact(fd, &c, 1, detail::Clock::now() + 5s, "client")) throw IOError("client left");
      bytes += c;
    }
  }
  static void answer_handshake(int fd) {
    EXPECT_EQ(read_request(fd).query, tw::Query::GetNumKeys);
    detail::send_all(fd, tw::encode_int64(0), detail::Clock::now() + 5s, "client");
  }

 private:
  detail::Fd listener_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

template <typename E, typename F>
void expect_error(F&& call, std::initializer_list<std::string> fragments) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const auto& f : fragments)
      EXPECT_NE(message.find(f), std::string::npos) << "missing '" << f << "' in: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
  }
}

}  // namespace

TEST(TorchProtocol, OurServerServesOurTorchProtocolClientByTheStoreContract) {
  TCPStoreServer server(0, "job-a");  // PyTorch clients carry no job id: accepted anyway
  TCPStore store(client_of(server.port(), StoreProtocol::Torch, "another-job"));
  test::check_store_contract(store);
  // The Torch client puts PyTorch's "/" before its keys; a ddp client sees them so.
  store.set("shared", "from torch");
  TCPStore ddp_client(client_of(server.port(), StoreProtocol::Ddp, "job-a"));
  EXPECT_EQ(ddp_client.get("/shared"), "from torch");
  ddp_client.set("/back", "from ddp");
  EXPECT_EQ(store.get("back"), "from ddp");
  EXPECT_EQ(store.num_keys(), ddp_client.num_keys());
  auto clone = store.clone();
  EXPECT_EQ(clone->get("shared"), "from torch");
}

TEST(TorchProtocol, TorchClientAtAServerThatIsNotPyTorch113SaysSo) {
  // A PyTorch 2.x server closes a connection whose first query is not VALIDATE; so does this one.
  detail::Fd listener = detail::listen_on(0);
  const auto port = detail::local_port(listener.get());
  std::thread closer([&] {
    detail::Fd c(::accept(listener.get(), nullptr, nullptr));
    char byte;
    detail::recv_exact(c.get(), &byte, 1, detail::Clock::now() + 5s, "client");
  });
  try {
    TCPStore store(client_of(port, StoreProtocol::Torch));
    ADD_FAILURE() << "connected to a server that closed the connection";
  } catch (const IOError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(cat("127.0.0.1:", port)), std::string::npos) << message;
    EXPECT_NE(message.find("does not speak PyTorch 1.13's TCPStore protocol"), std::string::npos) << message;
    EXPECT_NE(message.find("DDP_STORE_PROTOCOL=ddp"), std::string::npos) << message;
  }
  closer.join();
}

TEST(TorchProtocol, TorchClientErrorsSayWhatHappened) {
  auto options = [](std::uint16_t port) {
    TCPStoreOptions o = client_of(port, StoreProtocol::Torch);
    o.timeout = 300ms;
    return o;
  };
  {  // Accepts, never answers.
    FakeTorchServer server([](int fd) { FakeTorchServer::read_request(fd), std::this_thread::sleep_for(1s); });
    expect_error<TimeoutError>([&] { TCPStore store(options(server.port())); },
                               {"did not answer a PyTorch 1.13 TCPStore request", "DDP_STORE_PROTOCOL=ddp"});
  }
  {  // A reply that is no reply of CHECK's; the connection is then refused for good.
    FakeTorchServer server([](int fd) {
      FakeTorchServer::answer_handshake(fd);
      EXPECT_EQ(FakeTorchServer::read_request(fd).query, tw::Query::Check);
      detail::send_all(fd, "\x07", detail::Clock::now() + 5s, "client");
      std::this_thread::sleep_for(300ms);
    });
    TCPStore store(options(server.port()));
    expect_error<IOError>([&] { store.check({"k"}); }, {"check: unexpected reply 7 from the PyTorch store at"});
    expect_error<PeerLostError>([&] { store.num_keys(); }, {"broke earlier"});
  }
  {  // A value reply past the limit.
    FakeTorchServer server([](int fd) {
      FakeTorchServer::answer_handshake(fd);
      EXPECT_EQ(FakeTorchServer::read_request(fd).query, tw::Query::CompareSet);
      detail::send_all(fd, tw::encode_int64(std::int64_t{1} << 40), detail::Clock::now() + 5s, "client");
      std::this_thread::sleep_for(300ms);
    });
    TCPStore store(options(server.port()));
    expect_error<PeerLostError>([&] { store.compare_set("k", "", "v"); },
                                {"compare_set: lost the connection", "value of 1099511627776 bytes exceeds the limit"});
  }
  {  // The server goes away: an add cannot be explained by the key, so it is a lost server.
    FakeTorchServer server([](int fd) {
      FakeTorchServer::answer_handshake(fd);
      EXPECT_EQ(FakeTorchServer::read_request(fd).query, tw::Query::Add);
    });
    TCPStore store(options(server.port()));
    expect_error<PeerLostError>([&] { store.add("k", 1); },
                                {"add: lost the connection to the PyTorch store", "rank 0 or the launcher"});
    expect_error<PeerLostError>([&] { store.num_keys(); }, {"broke earlier"});  // at once, no reconnecting
  }
}

// ---------------------------------------------------------------------------------------------
// The server's PyTorch protocol at the byte level.

TEST(TorchProtocol, WatchKeyEventsFollowEveryChangeWhoeverMakesIt) {
  TCPStoreServer server(0, "");
  RawTorch watcher(server.port());
  watcher.send(query(tw::Query::WatchKey, "/w"));
  EXPECT_EQ(watcher.read(1), tw::encode_watch_registered());
  TCPStore ddp_client(client_of(server.port()));
  TCPStore torch_client(client_of(server.port(), StoreProtocol::Torch));
  auto next_event = [&](tw::WatchEvent event, const std::string& old_value, const std::string& new_value) {
    const std::string want = tw::encode_watch_event(event, "/w", old_value, new_value);
    EXPECT_EQ(watcher.read(want.size()), want);
  };
  ddp_client.set("/w", "1");
  next_event(tw::WatchEvent::KeyCreated, "", "1");
  torch_client.set("w", "2");
  next_event(tw::WatchEvent::KeyUpdated, "1", "2");
  EXPECT_EQ(torch_client.add("w", 3), 5);
  next_event(tw::WatchEvent::KeyUpdated, "2", "5");
  EXPECT_EQ(ddp_client.compare_set("/w", "5", "six"), "six");
  next_event(tw::WatchEvent::KeyUpdated, "5", "six");
  EXPECT_EQ(ddp_client.compare_set("/w", "5", "seven"), "six");  // unchanged: no event
  EXPECT_TRUE(torch_client.delete_key("w"));
  next_event(tw::WatchEvent::KeyDeleted, "six", "");
  ddp_client.set("/other", "x");  // another key: no event
  EXPECT_TRUE(watcher.silent(200ms));
}

TEST(TorchProtocol, ServesThePyTorch2HandshakeDialect) {
  TCPStoreServer server(0, "");
  TCPStore ddp_client(client_of(server.port()));
  RawTorch c(server.port());
  const auto v2 = tw::Dialect::Validated;
  tw::Request validate = query(tw::Query::Validate);
  validate.nonce = tw::kValidationMagic;
  c.send(validate, v2);
  tw::Request ping = query(tw::Query::Ping);
  ping.nonce = 4242;
  c.send(ping, v2);
  EXPECT_EQ(c.read(4), tw::encode_uint32(4242));
  c.send(query(tw::Query::Set, "/a", "1"), v2);
  tw::Request multi_set = query(tw::Query::MultiSet);
  multi_set.keys = {"/b", "/c"};
  multi_set.values = {"2", "3"};
  c.send(multi_set, v2);
  c.send(query(tw::Query::Append, "/c", "+"), v2);
  c.send(keys_query(tw::Query::MultiGet, {"/a", "/b", "/c"}), v2);
  EXPECT_EQ(c.read_bytes(), "1");
  EXPECT_EQ(c.read_bytes(), "2");
  EXPECT_EQ(c.read_bytes(), "3+");
  c.send(query(tw::Query::GetNumKeys), v2);
  EXPECT_EQ(c.read_int64(), ddp_client.num_keys());
  // A wait that its client cancels (a 2.x client's timeout)...
  c.send(keys_query(tw::Query::Wait, {"/later"}), v2);
  EXPECT_TRUE(c.silent(100ms));
  c.send(query(tw::Query::CancelWait), v2);
  EXPECT_EQ(c.read(1), tw::encode_wait(tw::WaitReply::WaitCanceled));
  // ...and one a ddp client's set answers.
  c.send(keys_query(tw::Query::Wait, {"/later"}), v2);
  EXPECT_TRUE(c.silent(100ms));
  ddp_client.set("/later", "now");
  EXPECT_EQ(c.read(1), tw::encode_wait(tw::WaitReply::StopWaiting));
  c.send(query(tw::Query::Get, "/later"), v2);
  EXPECT_EQ(c.read_bytes(), "now");
}

TEST(TorchProtocol, QueriesBehindAParkedWaitAreAnsweredInOrderAfterIt) {
  TCPStoreServer server(0, "");
  RawTorch c(server.port());
  c.send(keys_query(tw::Query::Wait, {"/k"}));
  c.send(query(tw::Query::GetNumKeys));  // queued behind the wait
  EXPECT_TRUE(c.silent(150ms));
  TCPStore(client_of(server.port())).set("/k", "v");
  EXPECT_EQ(c.read(1), tw::encode_wait(tw::WaitReply::StopWaiting));
  EXPECT_EQ(c.read_int64(), 1);
  // The releases after 1.13 cancel a wait that timed out on their side, without a handshake too.
  c.send(keys_query(tw::Query::Wait, {"/never"}));
  c.send(query(tw::Query::CancelWait));
  EXPECT_EQ(c.read(1), tw::encode_wait(tw::WaitReply::WaitCanceled));
  c.send(query(tw::Query::GetNumKeys));
  EXPECT_EQ(c.read_int64(), 1);
}

TEST(TorchProtocol, GarbageAndBadPyTorchRequestsCloseOnlyTheirOwnConnectionWithAReason) {
  TCPStoreServer server(0, "job-a");
  TCPStore ddp_client(client_of(server.port(), StoreProtocol::Ddp, "job-a"));
  TCPStore torch_client(client_of(server.port(), StoreProtocol::Torch));
  ddp_client.set("/k", "v");
  ddp_client.set("/text", "abc");
  ddp_client.set("/top", std::to_string(std::numeric_limits<std::int64_t>::max()));
  const auto v1 = tw::Dialect::V1_13;
  const auto v2 = tw::Dialect::Validated;
  tw::Request validate = query(tw::Query::Validate);
  validate.nonce = tw::kValidationMagic;

  struct Case {
    std::string name;
    std::string bytes;  // sent on a fresh connection
    std::string logged;
    bool hang_up = false;  // close our side after sending
  };
  std::string huge_key = "\x00"s + std::string(8, '\0');
  const std::uint64_t big = std::uint64_t{1} << 40;
  std::memcpy(huge_key.data() + 1, &big, 8);
  const std::vector<Case> cases =
      {
          {"neither protocol", "\x7f\x45LF\x02\x01",
           "neither a ddp nor a PyTorch store client: the connection began with \"\\x7fELF"},
          {"oversized key", huge_key, "key of 1099511627776 bytes exceeds the limit of 65536"},
          {"unknown 2.x query", tw::encode(validate, v2) + "\x2a",
           "unknown query byte 42 for the PyTorch 2.x (VALIDATE) protocol"},
          {"second VALIDATE", tw::encode(validate, v2) + tw::encode(validate, v2), "a second VALIDATE"},
          {"VALIDATE with a wrong magic number", tw::encode(validate, v2) + "\x00\x01\x02\x03\x04"s,
           "VALIDATE carries 0x04030201 instead of the magic number 0x3C85F7CE"},
          {"get of a missing key", tw::encode(query(tw::Query::Get, "/nope"), v1),
           "GET of \"/nope\", which does not exist"},
          {"add to a non-integer",
           tw::encode(
               [] {
    auto q = query(tw::Query::Add, "/text");
    q.number = 1;
    return q;
               }(),
               v1),
           "the key holds \"abc\", not an integer counter"},
          {"add that overflows",
           tw::encode(
               [] {
    auto q = query(tw::Query::Add, "/top");
    q.number = 1;
    return q;
               }(),
               v1),
           "the sum does not fit in 64 bits"},
                          {"truncated request", tw::encode(query(tw::Query::Set, "/k", "0123456789"), v1).substr(0, 15),
                           "the connection closed in the middle of a message", true},
                          };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    testing::internal::CaptureStderr();
    bool closed = false;
    {
      RawTorch raw(server.port());
      raw.send(c.bytes);
      if (!c.hang_up) closed = raw.closed_by_server();
      // Hanging up: first let the server accept the connection.
      for (int i = 0; c.hang_up && i < 500 && server.num_clients() < 3; ++i) std::this_thread::sleep_for(10ms);
    }
    if (c.hang_up) {  // then let it notice our side closing
      for (int i = 0; i < 500 && server.num_clients() > 2; ++i) std::this_thread::sleep_for(10ms);
      closed = server.num_clients() == 2;
    }
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(closed);
    EXPECT_NE(log.find(c.logged), std::string::npos) << log;
    EXPECT_NE(log.find("store server: closing the connection from"), std::string::npos) << log;
    // Honest clients of both kinds are still served.
    EXPECT_EQ(ddp_client.get("/k"), "v");
    EXPECT_EQ(torch_client.get("k"), "v");
  }
  EXPECT_EQ(server.num_clients(), 2u);
}

TEST(TorchProtocol, AWatcherThatStopsReadingIsDroppedNotBuffered) {
  TCPStoreServer server(0, "");
  RawTorch watcher(server.port());
  watcher.send(query(tw::Query::WatchKey, "/big"));
  EXPECT_EQ(watcher.read(1), tw::encode_watch_registered());
  // Generous: under ThreadSanitizer the server needs many seconds to push 200 MB into the socket,
  // and each set waits behind that work.
  auto options = client_of(server.port());
  options.timeout = 120s;
  TCPStore writer(options);
  testing::internal::CaptureStderr();
  const std::string value(kMaxStoreValueBytes, 'x');
  for (int i = 0; i < 3; ++i) writer.set("/big", value);  // 64, 128, 128 MiB of events: past the cap
  const auto end = std::chrono::steady_clock::now() + 120s;
  while (server.num_clients() > 1 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(server.num_clients(), 1u);
  EXPECT_NE(log.find("it does not read its replies"), std::string::npos) << log;
  EXPECT_EQ(writer.get("/big").size(), value.size());
}

}  // namespace ddp
