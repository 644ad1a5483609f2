#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <thread>

#include "ddp/error.h"
#include "ddp/prefix_store.h"
#include "ddp/tcp_store.h"
#include "net/socket.h"
#include "store/lost_ranks.h"
#include "store/wire.h"
#include "store_contract.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

TCPStoreOptions client_of(const TCPStoreServer& server, std::string job = "") {
  TCPStoreOptions options;
  options.port = server.port();
  options.timeout = 5s;
  options.job_id = std::move(job);
  return options;
}

// A raw socket to the server, for speaking bytes that no honest client would.
detail::Fd raw_connection(std::uint16_t port) {
  return detail::connect_with_retry("127.0.0.1", port, detail::Clock::now() + 5s, "test server");
}

std::string hello_frame(std::string job = "", std::int64_t rank = -1) {
  detail::wire::Request hello;
  hello.op = detail::wire::Op::Hello;
  hello.job_id = std::move(job);
  hello.number = rank;
  hello.pid = 1;
  hello.host = "test";
  return std::string(detail::wire::kPreamble) + detail::wire::encode(hello);
}

// Reads one whole ddp response frame from a raw connection.
detail::wire::Response read_response(int fd, detail::Clock::time_point deadline) {
  detail::wire::Response response;
  char header[4];
  if (!detail::recv_exact(fd, header, 4, deadline, "server")) {
    ADD_FAILURE() << "the server closed the connection instead of replying";
    return response;
  }
  std::uint32_t size;
  std::memcpy(&size, header, 4);
  std::string frame(header, 4);
  frame.resize(4 + size);
  EXPECT_TRUE(detail::recv_exact(fd, frame.data() + 4, size, deadline, "server"));
  std::size_t consumed;
  std::string error;
  EXPECT_EQ(detail::wire::parse(frame, response, consumed, error), detail::wire::Parse::Complete) << error;
  return response;
}

// True when the server closed the connection (reads EOF within the timeout).
bool closed_by_server(int fd) {
  char buf[256];
  for (;;) {
    try {
      if (!detail::recv_exact(fd, buf, 1, detail::Clock::now() + 5s, "server")) return true;
    } catch (const IOError&) {
      return true;
    } catch (const TimeoutError&) {
      return false;
    }
  }
}

}  // namespace

TEST(TCPStore, FollowsTheStoreContract) {
  TCPStoreServer server(0, "");
  TCPStore store(client_of(server));
  test::check_store_contract(store);
}

TEST(TCPStore, ServerInProcessWithPortZero) {
  TCPStoreOptions options;
  options.port = 0;
  options.is_server = true;
  options.timeout = 5s;
  TCPStore store(options);
  EXPECT_GT(store.port(), 0);
  store.set("k", "v");
  auto other = store.clone();
  EXPECT_EQ(other->get("k"), "v");
}

TEST(TCPStore, BlockingGetIsWokenByAnotherClient) {
  TCPStoreServer server(0, "");
  TCPStore waiter(client_of(server)), setter(client_of(server));
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    setter.set("late", "here");
  });
  EXPECT_EQ(waiter.get("late"), "here");
  t.join();
}

TEST(TCPStore, WaitTimesOutNamingTheMissingKeys) {
  TCPStoreServer server(0, "");
  TCPStore store(client_of(server));
  store.set("present", "1");
  try {
    store.wait({"present", "missing-key"}, 200ms);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("missing-key"), std::string::npos) << message;
    EXPECT_EQ(message.find("\"present\""), std::string::npos) << message;
  }
  // The connection is still in step after a timeout.
  EXPECT_EQ(store.get("present"), "1");
}

TEST(TCPStore, AMultiGetIsOneRequestThatWaitsForTheLastKey) {
  TCPStoreServer server(0, "");
  TCPStore reader(client_of(server)), writer(client_of(server));
  writer.set("peer/0", "a");
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    writer.set("peer/2", "c");
    writer.set("peer/1", std::string(1 << 20, 'b'));  // a large value rides in the same reply
  });
  const auto values = reader.multi_get({"peer/0", "peer/1", "peer/2"}, 5s);
  late.join();
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[0], "a");
  EXPECT_EQ(values[1], std::string(1 << 20, 'b'));
  EXPECT_EQ(values[2], "c");

  PrefixStore prefixed("peer", std::make_shared<TCPStore>(client_of(server)));
  EXPECT_EQ(prefixed.multi_get({"2", "0"}), (std::vector<std::string>{"c", "a"}));
  try {
    prefixed.multi_get({"0", "3"}, 200ms);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("store multi_get timed out after 200 ms"), std::string::npos) << message;
    EXPECT_NE(message.find("peer/3"), std::string::npos) << message;
    EXPECT_EQ(message.find("peer/0"), std::string::npos) << message;  // present: not named
  }
  EXPECT_EQ(reader.get("peer/0"), "a");  // the connection serves on after the timeout
}

TEST(TCPStore, AMultiGetLargerThanOneReplyIsAnErrorAndTheConnectionServesOn) {
  TCPStoreServer server(0, "");
  auto options = client_of(server);
  options.timeout = 60s;  // two 64 MiB values: a set took over 5 s under TSan
  TCPStore store(options);
  const std::string big(kMaxStoreValueBytes, 'x');
  store.set("big/0", big);
  store.set("big/1", big);
  try {
    store.multi_get({"big/0", "big/1"});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("multi_get: the 2 values total 134217741 bytes, more than one reply carries"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("get the keys in smaller groups"), std::string::npos) << message;
  }
  EXPECT_EQ(store.multi_get({"big/0"})[0].size(), big.size());
}

TEST(TCPStore, ARequestThisServerDoesNotKnowIsAnsweredWithAnErrorAndTheConnectionServesOn) {
  TCPStoreServer server(0, "");
  TCPStore honest(client_of(server));
  honest.set("k", "v");
  const auto deadline = detail::Clock::now() + 5s;
  auto newer = raw_connection(server.port());  // a newer client's request code, well framed
  detail::send_all(newer.get(), hello_frame(), deadline, "server");
  EXPECT_EQ(read_response(newer.get(), deadline).status, detail::wire::Status::Ok);
  const std::string body = std::string("\x63") + "anything a later version sends";
  const auto size = static_cast<std::uint32_t>(body.size());
  detail::send_all(newer.get(), std::string(reinterpret_cast<const char*>(&size), 4) + body, deadline, "server");
  auto refused = read_response(newer.get(), deadline);
  EXPECT_EQ(refused.status, detail::wire::Status::Error);
  EXPECT_NE(refused.value.find("does not know this request (unknown request code 99)"), std::string::npos)
      << refused.value;
  EXPECT_NE(refused.value.find("older ddp than this client"), std::string::npos) << refused.value;
  detail::wire::Request get{detail::wire::Op::Get, "k"};
  get.number = 1000;
  detail::send_all(newer.get(), detail::wire::encode(get), deadline, "server");
  auto value = read_response(newer.get(), deadline);
  EXPECT_EQ(value.status, detail::wire::Status::Value);
  EXPECT_EQ(value.value, "v");
}

TEST(TCPStore, ServesOver1024ConcurrentClientsParkedOnOneKey) {
  TCPStoreServer server(0, "");
  constexpr int kClients = 1100;
  const auto deadline = detail::Clock::now() + 60s;
  std::vector<detail::Fd> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(raw_connection(server.port()));
    detail::send_all(clients.back().get(), hello_frame(), deadline, "server");
  }
  detail::wire::Request get{detail::wire::Op::Get, "go"};
  get.number = 30000;
  const std::string get_frame = detail::wire::encode(get);
  auto read_reply = [&](int fd) { return read_response(fd, deadline); };
  for (auto& c : clients) {
    EXPECT_EQ(read_reply(c.get()).status, detail::wire::Status::Ok);  // hello
    detail::send_all(c.get(), get_frame, deadline, "server");         // parks on "go"
  }
  EXPECT_GE(server.num_clients(), static_cast<std::size_t>(kClients));
  TCPStore setter(client_of(server));
  setter.set("go", "now");
  for (auto& c : clients) {
    auto response = read_reply(c.get());
    EXPECT_EQ(response.status, detail::wire::Status::Value);
    EXPECT_EQ(response.value, "now");
  }
}

TEST(TCPStore, ConcurrentAddsFromManyProcessesAreAtomic) {
  static TCPStoreServer* server = nullptr;
  static int port = 0;
  std::unique_ptr<TCPStoreServer> owned;
  if (!test::is_rank_process()) {
    owned = std::make_unique<TCPStoreServer>(0, "job-x");
    server = owned.get();
    port = server->port();
  }
  test::RunOptions options;
  options.env["TEST_STORE_PORT"] = std::to_string(port);
  test::run_ranks(
      5,
      [](int rank, int world) {
    TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(std::atoi(std::getenv("TEST_STORE_PORT")));
    o.job_id = "job-x";
    o.rank = rank;
    o.timeout = 20s;
    TCPStore store(o);
    for (int i = 0; i < 200; ++i) store.add("total", 1);
    store.set("done/" + std::to_string(rank), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back("done/" + std::to_string(r));
    store.wait(keys);
    EXPECT_EQ(store.get("total"), "1000");
      },
      options);
  if (owned) {
    TCPStore check(client_of(*owned, "job-x"));
    EXPECT_EQ(check.get("total"), "1000");
    // Every rank said goodbye: none is recorded as lost.
    EXPECT_TRUE(detail::find_lost_ranks(check, {0, 1, 2, 3, 4}).empty());
  }
}

TEST(TCPStore, RefusesAClientOfAnotherJobWithClearErrors) {
  TCPStoreServer server(0, "job-a");
  TCPStore ours(client_of(server, "job-a"));
  try {
    TCPStore theirs(client_of(server, "job-b"));
    FAIL() << "a client of another job was accepted";
  } catch (const MismatchError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("job-a"), std::string::npos) << message;
    EXPECT_NE(message.find("job-b"), std::string::npos) << message;
    EXPECT_NE(message.find("port"), std::string::npos) << message;
  }
  ours.set("still", "serving");
  EXPECT_EQ(ours.get("still"), "serving");
}

TEST(TCPStore, ClosesOnlyTheConnectionThatSendsGarbage) {
  TCPStoreServer server(0, "");
  TCPStore honest(client_of(server));
  honest.set("k", "v");
  const auto deadline = detail::Clock::now() + 5s;

  auto garbage = raw_connection(server.port());  // random bytes instead of a hello
  detail::send_all(garbage.get(), std::string("GET / HTTP/1.1\r\n\r\n"), deadline, "server");
  EXPECT_TRUE(closed_by_server(garbage.get()));

  auto no_hello = raw_connection(server.port());  // the preamble, then a request before hello
  detail::wire::Request set{detail::wire::Op::Set, "k", "stolen"};
  detail::send_all(no_hello.get(), std::string(detail::wire::kPreamble) + detail::wire::encode(set), deadline,
                   "server");
  EXPECT_TRUE(closed_by_server(no_hello.get()));

  auto oversized = raw_connection(server.port());  // a length prefix far past the limit
  std::string frame = hello_frame();
  detail::send_all(oversized.get(), frame, deadline, "server");
  char ok[16];
  ASSERT_TRUE(detail::recv_exact(oversized.get(), ok, 5, deadline, "server"));  // the hello's reply
  std::uint32_t huge = 0x7fffffff;
  detail::send_all(oversized.get(), std::string(reinterpret_cast<char*>(&huge), 4), deadline, "server");
  EXPECT_TRUE(closed_by_server(oversized.get()));

  auto malformed = raw_connection(server.port());  // a frame whose key length runs past its end
  std::string bad = hello_frame();
  bad += std::string("\x09\x00\x00\x00\x02\xff\xff\x00\x00xxxx", 13);
  detail::send_all(malformed.get(), bad, deadline, "server");
  EXPECT_TRUE(closed_by_server(malformed.get()));

  {
    auto truncated = raw_connection(server.port());  // half a frame, then the client vanishes
    std::string half = hello_frame();
    detail::send_all(truncated.get(), half.substr(0, half.size() / 2), deadline, "server");
  }

  EXPECT_EQ(honest.get("k"), "v");
  honest.set("after", "garbage");
  TCPStore newcomer(client_of(server));
  EXPECT_EQ(newcomer.get("after"), "garbage");
}

TEST(TCPStore, AnAddThatOverflowsIsAnInvalidArgumentAndTheConnectionServesOn) {
  TCPStoreServer server(0, "");
  TCPStore store(client_of(server));
  store.add("big", std::numeric_limits<std::int64_t>::max());
  try {
    store.add("big", 1);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the sum does not fit in 64 bits"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.get("big"), "9223372036854775807");
}

TEST(TCPStore, RejectsValuesOverTheLimitOnTheClient) {
  TCPStoreServer server(0, "");
  TCPStore store(client_of(server));
  std::string big(kMaxStoreValueBytes + 1, 'x');
  EXPECT_THROW(store.set("big", big), InvalidArgument);
  std::string largest(1 << 20, 'y');
  store.set("mb", largest);
  EXPECT_EQ(store.get("mb"), largest);
}

TEST(TCPStore, AClientOfTheNextInitWaitsForTheNewServer) {
  auto old_server = std::make_unique<TCPStoreServer>(0, "job", 1);
  const auto port = old_server->port();
  TCPStore(client_of(*old_server, "job")).set("from", "generation 1");
  TCPStoreOptions options = client_of(*old_server, "job");
  options.generation = 2;
  std::unique_ptr<TCPStoreServer> new_server;
  std::thread successor([&] {
    std::this_thread::sleep_for(300ms);
    old_server.reset();
    new_server = std::make_unique<TCPStoreServer>(port, "job", 2);
  });
  TCPStore client(options);  // reaches the old server first, is told to wait, then joins the new one
  successor.join();
  EXPECT_FALSE(client.check({"from"})) << "joined the old store";
  client.set("from", "generation 2");
  // An old server that never goes away: a clear timeout.
  TCPStoreServer stale(0, "job", 3);
  TCPStoreOptions late = client_of(stale, "job");
  late.generation = 4;
  late.timeout = 500ms;
  try {
    TCPStore never(late);
    FAIL() << "joined a store of an earlier init";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("earlier init_process_group of this job (generation 3"), std::string::npos)
        << e.what();
  }
}

TEST(TCPStore, PortInUseIsAClearError) {
  TCPStoreServer first(0, "");
  try {
    TCPStoreServer second(first.port(), "");
    FAIL() << "two servers on one port";
  } catch (const IOError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(std::to_string(first.port())), std::string::npos) << message;
    EXPECT_NE(message.find("in use"), std::string::npos) << message;
  }
}

TEST(TCPStore, ConnectTimeoutNamesHostPortAndWhatToCheck) {
  TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(test::free_port());  // nobody listens there
  options.timeout = 700ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    TCPStore store(options);
    FAIL() << "connected to nothing";
  } catch (const TimeoutError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(options.port)), std::string::npos) << message;
    EXPECT_NE(message.find("MASTER_ADDR"), std::string::npos) << message;
    EXPECT_NE(message.find("firewall"), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(TCPStore, RecordsARankThatVanishesWithoutGoodbye) {
  TCPStoreServer server(0, "");
  TCPStore observer(client_of(server));
  {
    auto dying = raw_connection(server.port());
    std::string frame = hello_frame("", 3);
    detail::send_all(dying.get(), frame, detail::Clock::now() + 5s, "server");
    char reply[5];
    ASSERT_TRUE(detail::recv_exact(dying.get(), reply, 5, detail::Clock::now() + 5s, "server"));
  }  // closed without a goodbye, as a killed process's socket is
  observer.wait({detail::lost_rank_key(3)}, 5s);
  auto lost = detail::find_lost_ranks(observer, {0, 1, 2, 3});
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].first, 3);
  EXPECT_NE(lost[0].second.find("pid 1 on test"), std::string::npos) << lost[0].second;
}

TEST(TCPStore, ByeIsTheLastMessageAndNoLoss) {
  TCPStoreServer server(0, "");
  TCPStore observer(client_of(server));
  auto leaving = raw_connection(server.port());
  detail::wire::Request bye;
  bye.op = detail::wire::Op::Bye;
  detail::wire::Request set{detail::wire::Op::Set, "after-bye", "x"};
  detail::send_all(leaving.get(), hello_frame("", 4) + detail::wire::encode(bye) + detail::wire::encode(set),
                   detail::Clock::now() + 5s, "server");
  char reply[5];
  ASSERT_TRUE(detail::recv_exact(leaving.get(), reply, 5, detail::Clock::now() + 5s, "server"));  // hello's ok
  EXPECT_TRUE(closed_by_server(leaving.get()));  // the server closes after bye, reading no more
  EXPECT_FALSE(observer.check({"after-bye"}));
  EXPECT_FALSE(observer.check({detail::lost_rank_key(4)})) << "a rank that said bye was recorded lost";
}

TEST(TCPStore, AWaitWithATimeoutTooLongForTheClockWaitsForItsKey) {
  TCPStoreServer server(0, "");
  TCPStore setter(client_of(server));
  auto raw = raw_connection(server.port());
  const auto deadline = detail::Clock::now() + 5s;
  detail::wire::Request get{detail::wire::Op::Get, "eventually"};
  get.number = std::numeric_limits<std::int64_t>::max();
  detail::send_all(raw.get(), hello_frame() + detail::wire::encode(get), deadline, "server");
  char ok[5];
  ASSERT_TRUE(detail::recv_exact(raw.get(), ok, 5, deadline, "server"));
  char byte;
  EXPECT_THROW(detail::recv_exact(raw.get(), &byte, 1, detail::Clock::now() + 200ms, "server"), TimeoutError)
      << "answered before the key was set";
  setter.set("eventually", "here");
  const std::string want = detail::wire::encode(detail::wire::Response{detail::wire::Status::Value, "here"});
  std::string got(want.size(), '\0');
  ASSERT_TRUE(detail::recv_exact(raw.get(), got.data(), got.size(), deadline, "server"));
  EXPECT_EQ(got, want);
}

TEST(TCPStore, ClientFailsClearlyWhenTheServerGoesAway) {
  auto server = std::make_unique<TCPStoreServer>(0, "");
  TCPStore store(client_of(*server));
  store.set("k", "v");
  server.reset();
  try {
    store.get("k");
    FAIL() << "no error after the server went away";
  } catch (const PeerLostError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("store"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0 or the launcher"), std::string::npos) << message;
  }
}

// ---- The server's event loop under load: how it reads, writes and accepts (issue 21).

// A reply bigger than the socket takes at once waits for EPOLLOUT; once it is out the server
// stops watching for it, and a later big reply must turn it on again.
TEST(TCPStoreServer, RepliesTheSocketCannotTakeAtOnceArriveWholeAndTheConnectionServesOn) {
  TCPStoreServer server(0, "");
  TCPStore setter(client_of(server));
  std::string big(16 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i % 251);
  setter.set("big", big);
  setter.set("small", "s");
  auto raw = raw_connection(server.port());
  const auto deadline = detail::Clock::now() + 30s;
  detail::wire::Request get_big{detail::wire::Op::Get, "big"}, get_small{detail::wire::Op::Get, "small"};
  get_big.number = get_small.number = 5000;
  detail::send_all(raw.get(), hello_frame(), deadline, "server");
  EXPECT_EQ(read_response(raw.get(), deadline).status, detail::wire::Status::Ok);
  for (int round = 0; round < 2; ++round) {
    // Two big replies queued behind each other while nobody reads: far more than the socket holds.
    detail::send_all(raw.get(), detail::wire::encode(get_big) + detail::wire::encode(get_big), deadline, "server");
    std::this_thread::sleep_for(300ms);
    for (int i = 0; i < 2; ++i) {
      auto r = read_response(raw.get(), deadline);
      EXPECT_EQ(r.status, detail::wire::Status::Value);
      EXPECT_TRUE(r.value == big) << "round " << round << ", reply " << i << ": " << r.value.size() << " bytes";
    }
    detail::send_all(raw.get(), detail::wire::encode(get_small), deadline, "server");
    EXPECT_EQ(read_response(raw.get(), deadline).value, "s") << "round " << round;
  }
}

// The server reads what is there and comes back for the rest when epoll says so: a request that
// trickles in a byte at a time, and frames that fill its 64 KiB read exactly, are served alike.
TEST(TCPStoreServer, RequestsInPiecesAndOfExactlyItsReadSizeAreServed) {
  TCPStoreServer server(0, "");
  TCPStore observer(client_of(server));
  auto raw = raw_connection(server.port());
  const auto deadline = detail::Clock::now() + 10s;
  const detail::wire::Request set{detail::wire::Op::Set, "piece", "meal"};
  const std::string trickle = hello_frame() + detail::wire::encode(set);
  for (char byte : trickle) {
    detail::send_all(raw.get(), std::string_view(&byte, 1), deadline, "server");
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(read_response(raw.get(), deadline).status, detail::wire::Status::Ok);  // hello
  EXPECT_EQ(read_response(raw.get(), deadline).status, detail::wire::Status::Ok);  // set
  EXPECT_EQ(observer.get("piece"), "meal");

  // Two sets that together are exactly two reads of 64 KiB, then one more byte-sized request.
  detail::wire::Request first{detail::wire::Op::Set, "exact1", ""}, second{detail::wire::Op::Set, "exact2", ""};
  const std::size_t overhead = detail::wire::encode(first).size();
  first.value.assign((64 << 10) - overhead, 'a');
  second.value.assign((64 << 10) - detail::wire::encode(second).size(), 'b');
  const std::string exact = detail::wire::encode(first) + detail::wire::encode(second);
  ASSERT_EQ(exact.size(), std::size_t{128} << 10);
  detail::send_all(raw.get(), exact, deadline, "server");
  EXPECT_EQ(read_response(raw.get(), deadline).status, detail::wire::Status::Ok);
  EXPECT_EQ(read_response(raw.get(), deadline).status, detail::wire::Status::Ok);
  EXPECT_EQ(observer.get("exact1"), first.value);
  EXPECT_EQ(observer.get("exact2"), second.value);
}

// A rank's last request and the end of its stream arrive together: the request is carried out,
// and the closing (next time epoll reports the socket) records the rank lost.
TEST(TCPStoreServer, ARequestRightBeforeTheStreamEndsIsCarriedOutAndTheRankRecordedLost) {
  TCPStoreServer server(0, "");
  TCPStore observer(client_of(server));
  auto raw = raw_connection(server.port());
  const detail::wire::Request set{detail::wire::Op::Set, "last", "words"};
  detail::send_all(raw.get(), hello_frame("", 5) + detail::wire::encode(set), detail::Clock::now() + 5s, "server");
  ::shutdown(raw.get(), SHUT_WR);  // the data and the end of the stream, back to back
  observer.wait({detail::lost_rank_key(5)}, 5s);
  EXPECT_EQ(observer.get("last"), "words");
}

// Connections that queue up while other clients keep every epoll batch full are all accepted and
// served (the server takes queued connections before each batch while they keep coming).
TEST(TCPStoreServer, ConnectionsArrivingWhileOthersKeepItBusyAreAllServed) {
  TCPStoreServer server(0, "");
  std::atomic<bool> stop{false};
  std::atomic<long> busy_requests{0};
  std::vector<std::thread> busy;
  for (int t = 0; t < 4; ++t) {
    busy.emplace_back([&, t] {
      TCPStore store(client_of(server));
      const std::string key = "busy/" + std::to_string(t);
      while (!stop.load()) {
        store.set(key, "x");
        store.get(key);
        busy_requests += 2;
      }
    });
  }
  constexpr int kClients = 1500;
  const auto deadline = detail::Clock::now() + 60s;
  std::vector<detail::Fd> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(raw_connection(server.port()));
    detail::wire::Request set{detail::wire::Op::Set, "arrived/" + std::to_string(i), "yes"};
    detail::send_all(clients.back().get(), hello_frame() + detail::wire::encode(set), deadline, "server");
  }
  for (auto& c : clients) {
    EXPECT_EQ(read_response(c.get(), deadline).status, detail::wire::Status::Ok);  // hello
    EXPECT_EQ(read_response(c.get(), deadline).status, detail::wire::Status::Ok);  // set
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_GT(busy_requests.load(), 0);
  TCPStore check(client_of(server));
  EXPECT_EQ(check.num_keys(), kClients + 4);
  EXPECT_EQ(check.get("arrived/" + std::to_string(kClients - 1)), "yes");
}

}  // namespace ddp
