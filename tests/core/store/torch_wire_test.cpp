// PyTorch's TCPStore protocol as pure bytes: the encodings are pinned against bytes captured from
// PyTorch 1.13's own client (torch.distributed.TCPStore talking to a recording socket), every
// request survives a round trip and arrival in pieces, and each way a request can be refused says why.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "store/torch_wire.h"
#include "util/strings.h"

namespace ddp::detail::torch_wire {
namespace {

using namespace std::string_literals;

std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string sized(const std::string& s) { return u64(s.size()) + s; }
std::string magic() {
  std::uint32_t m = kValidationMagic;
  return std::string(reinterpret_cast<const char*>(&m), 4);
}

Request make(Query query, std::string key = "", std::string value = "", std::string value2 = "") {
  Request q;
  q.query = query;
  q.key = std::move(key);
  q.value = std::move(value);
  q.value2 = std::move(value2);
  return q;
}

// Parses a whole buffer that must hold exactly one request.
Request parse_one(const std::string& bytes, Dialect dialect) {
  Request q;
  std::size_t consumed = 0;
  std::string error;
  EXPECT_EQ(parse(bytes, dialect, q, consumed, error), Parse::Complete) << error;
  EXPECT_EQ(consumed, bytes.size());
  return q;
}

std::string refusal(const std::string& bytes, Dialect dialect, Parse expected) {
  Request q;
  std::size_t consumed = 0;
  std::string error;
  EXPECT_EQ(parse(bytes, dialect, q, consumed, error), expected);
  return error;
}

// Every request kind, with awkward contents (empty and binary values, several keys).
std::vector<Request> samples(Dialect dialect) {
  std::vector<Request> out = {make(Query::Set, "/k", "v"),
                              make(Query::Set, "", ""),
                              make(Query::Set, "/bin", "\0\1\xff"s),
                              make(Query::CompareSet, "/k", "old", "new"),
                              make(Query::Get, "/g"),
                              make(Query::DeleteKey, "/d"),
                              make(Query::GetNumKeys)};
  Request add = make(Query::Add, "init/");
  add.number = -7;
  out.push_back(add);
  for (Query q : {Query::Check, Query::Wait}) {
    Request r = make(q);
    r.keys = {"/a", "", "/c"};
    out.push_back(r);
  }
  if (dialect == Dialect::V1_13) {
    out.push_back(make(Query::WatchKey, "/w"));
  } else {
    Request v = make(Query::Validate);
    v.nonce = kValidationMagic;
    out.push_back(v);
    Request ping = make(Query::Ping);
    ping.nonce = 12345;
    out.push_back(ping);
  }
  {  // Both: 1.13's successors appended these before the VALIDATE renumbering.
    out.push_back(make(Query::Append, "/app", "tail"));
    Request mg = make(Query::MultiGet);
    mg.keys = {"/x", "/y"};
    out.push_back(mg);
    Request ms = make(Query::MultiSet);
    ms.keys = {"/x", "/y"};
    ms.values = {"1", ""};
    out.push_back(ms);
    out.push_back(make(Query::CancelWait));
  }
  return out;
}

void expect_same(const Request& a, const Request& b) {
  EXPECT_EQ(a.query, b.query);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.value2, b.value2);
  EXPECT_EQ(a.number, b.number);
  EXPECT_EQ(a.nonce, b.nonce);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
}

}  // namespace

TEST(TorchWire, EncodesRequestsByteForByteAsPyTorch113sClient) {
  // Captured from torch 1.13.1 (Debian python3-torch): TCPStore(host, port, 2, False) then
  // set("k","v"), add("c",5), compare_set("k","v","w"), num_keys(), delete_key("k"),
  // wait(["a","b"]), get("g") (a WAIT, then a GET).
  const auto v = Dialect::V1_13;
  EXPECT_EQ(encode(
                [] {
    Request q = make(Query::Add, "init/");
    q.number = 1;
    return q;
                }(),
                v),
            "\x03\x05\0\0\0\0\0\0\0init/\x01\0\0\0\0\0\0\0"s);
  EXPECT_EQ(encode(make(Query::Set, "/k", "v"), v), "\x00\x02\0\0\0\0\0\0\0/k\x01\0\0\0\0\0\0\0v"s);
  EXPECT_EQ(encode(
                [] {
    Request q = make(Query::Add, "/c");
    q.number = 5;
    return q;
                }(),
                v),
            "\x03\x02\0\0\0\0\0\0\0/c\x05\0\0\0\0\0\0\0"s);
  EXPECT_EQ(encode(make(Query::CompareSet, "/k", "v", "w"), v),
            "\x01\x02\0\0\0\0\0\0\0/k\x01\0\0\0\0\0\0\0v\x01\0\0\0\0\0\0\0w"s);
  EXPECT_EQ(encode(make(Query::GetNumKeys), v), "\x06"s);
  EXPECT_EQ(encode(make(Query::DeleteKey, "/k"), v), "\x08\x02\0\0\0\0\0\0\0/k"s);
  Request wait = make(Query::Wait);
  wait.keys = {"/a", "/b"};
  EXPECT_EQ(encode(wait, v), "\x05\x02\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0/a\x02\0\0\0\0\0\0\0/b"s);
  EXPECT_EQ(encode(make(Query::Get, "/g"), v), "\x02\x02\0\0\0\0\0\0\0/g"s);
}

TEST(TorchWire, RepliesAreThePlainFieldsPyTorchReads) {
  EXPECT_EQ(encode_bytes("val"), "\x03\0\0\0\0\0\0\0val"s);
  EXPECT_EQ(encode_bytes(""), u64(0));
  EXPECT_EQ(encode_int64(5), "\x05\0\0\0\0\0\0\0"s);
  EXPECT_EQ(encode_int64(-1), std::string(8, '\xff'));
  EXPECT_EQ(encode_check(CheckReply::Ready), "\x00"s);
  EXPECT_EQ(encode_check(CheckReply::NotReady), "\x01"s);
  EXPECT_EQ(encode_wait(WaitReply::StopWaiting), "\x00"s);
  EXPECT_EQ(encode_wait(WaitReply::WaitCanceled), "\x01"s);
  EXPECT_EQ(encode_watch_registered(), "\x03"s);
  EXPECT_EQ(encode_uint32(0x01020304), "\x04\x03\x02\x01"s);
  EXPECT_EQ(encode_watch_event(WatchEvent::KeyUpdated, "/k", "a", "bc"),
            "\x00"s + sized("/k") + sized("a") + sized("bc"));
  EXPECT_EQ(encode_watch_event(WatchEvent::KeyCreated, "/k", "", "x"), "\x01"s + sized("/k") + sized("") + sized("x"));
}

TEST(TorchWire, TheFirstBytesTellDdpFromPyTorchFromAnythingElse) {
  EXPECT_EQ(classify_opening(""), Opening::NeedMore);
  EXPECT_EQ(classify_opening("D"), Opening::NeedMore);
  EXPECT_EQ(classify_opening("DDP"), Opening::NeedMore);
  EXPECT_EQ(classify_opening("DDPS"), Opening::Ddp);
  EXPECT_EQ(classify_opening("DDPS\x10\0\0\0"s), Opening::Ddp);
  EXPECT_EQ(classify_opening("DDPX"), Opening::Unknown);
  EXPECT_EQ(classify_opening("DX"), Opening::Unknown);
  EXPECT_EQ(classify_opening("GET / HTTP/1.1\r\n"), Opening::Unknown);
  EXPECT_EQ(classify_opening("\x16\x03\x01"s), Opening::Unknown);  // a TLS hello
  EXPECT_EQ(classify_opening("\x0d"s), Opening::Unknown);          // past the last unvalidated query
  EXPECT_EQ(classify_opening("\xff"s), Opening::Unknown);
  for (char code = 1; code <= 12; ++code)
    EXPECT_EQ(classify_opening(std::string(1, code)), Opening::Torch) << int(code);
  // Query byte 0 is SET in 1.13 and VALIDATE in 2.x: the magic number decides.
  EXPECT_EQ(classify_opening("\x00"s), Opening::NeedMore);
  EXPECT_EQ(classify_opening("\x00\x02\0\0"s), Opening::NeedMore);
  EXPECT_EQ(classify_opening("\x00\x02\0\0\0"s), Opening::Torch);
  EXPECT_EQ(classify_opening("\x00"s + magic()), Opening::TorchValidated);
}

TEST(TorchWire, EveryRequestSurvivesARoundTripInBothDialects) {
  for (Dialect dialect : {Dialect::V1_13, Dialect::Validated}) {
    for (const Request& q : samples(dialect)) {
      SCOPED_TRACE(cat(to_string(dialect), " ", to_string(q.query)));
      const std::string bytes = encode(q, dialect);
      expect_same(parse_one(bytes, dialect), q);
      // Two requests back to back: the first parse takes exactly the first.
      Request first;
      std::size_t consumed = 0;
      std::string error;
      ASSERT_EQ(parse(bytes + bytes, dialect, first, consumed, error), Parse::Complete);
      EXPECT_EQ(consumed, bytes.size());
    }
  }
}

TEST(TorchWire, ARequestArrivingInPiecesNeedsMoreUntilItIsWhole) {
  for (Dialect dialect : {Dialect::V1_13, Dialect::Validated}) {
    for (const Request& q : samples(dialect)) {
      const std::string bytes = encode(q, dialect);
      for (std::size_t n = 0; n < bytes.size(); ++n) {
        Request out;
        std::size_t consumed = 0;
        std::string error;
        EXPECT_EQ(parse(std::string_view(bytes).substr(0, n), dialect, out, consumed, error), Parse::NeedMore)
            << to_string(q.query) << " cut at " << n << ": " << error;
      }
    }
  }
}

TEST(TorchWire, TheDialectsNumberTheirQueriesDifferently) {
  std::uint8_t code = 0;
  EXPECT_TRUE(query_code(Query::Set, Dialect::V1_13, code));
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(query_code(Query::Set, Dialect::Validated, code));
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(query_code(Query::DeleteKey, Dialect::V1_13, code));
  EXPECT_EQ(code, 8);
  EXPECT_TRUE(query_code(Query::GetNumKeys, Dialect::Validated, code));
  EXPECT_EQ(code, 7);
  EXPECT_TRUE(query_code(Query::Ping, Dialect::Validated, code));
  EXPECT_EQ(code, 13);
  for (Query q : {Query::Append, Query::MultiGet, Query::MultiSet, Query::CancelWait}) {  // the same in both
    std::uint8_t v1 = 0, v2 = 0;
    EXPECT_TRUE(query_code(q, Dialect::V1_13, v1));
    EXPECT_TRUE(query_code(q, Dialect::Validated, v2));
    EXPECT_EQ(v1, v2) << to_string(q);
  }
  EXPECT_FALSE(query_code(Query::WatchKey, Dialect::Validated, code));
  EXPECT_FALSE(query_code(Query::Validate, Dialect::V1_13, code));
  try {
    encode(make(Query::Ping), Dialect::V1_13);
    FAIL() << "encoded a query 1.13 does not have";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("PING"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1.13"), std::string::npos) << e.what();
  }
  // Byte 7 is WATCH_KEY in 1.13 and GETNUMKEYS in 2.x.
  EXPECT_EQ(parse_one("\x07"s, Dialect::Validated).query, Query::GetNumKeys);
  EXPECT_EQ(parse_one("\x07"s + sized("/w"), Dialect::V1_13).query, Query::WatchKey);
}

TEST(TorchWire, UnknownQueriesAndBadMagicAreMalformedWithAReason) {
  auto error = refusal("\x0d"s, Dialect::V1_13, Parse::Malformed);
  EXPECT_NE(error.find("unknown query byte 13"), std::string::npos) << error;
  EXPECT_NE(error.find("PyTorch 1.13"), std::string::npos) << error;
  error = refusal("\x0e"s, Dialect::Validated, Parse::Malformed);
  EXPECT_NE(error.find("unknown query byte 14"), std::string::npos) << error;
  error = refusal("\x00\x78\x56\x34\x12"s, Dialect::Validated, Parse::Malformed);
  EXPECT_NE(error.find("VALIDATE carries 0x12345678 instead of the magic number 0x3C85F7CE"), std::string::npos)
      << error;
}

TEST(TorchWire, DeclaredSizesPastTheLimitsAreRefusedBeforeTheBytesArrive) {
  const auto v = Dialect::V1_13;
  auto error = refusal("\x00"s + u64(kMaxStoreKeyBytes + 1), v, Parse::Oversized);
  EXPECT_NE(error.find("key of 65537 bytes exceeds the limit of 65536"), std::string::npos) << error;
  error = refusal("\x00"s + sized("/k") + u64(kMaxStoreValueBytes + 1), v, Parse::Oversized);
  EXPECT_NE(error.find("value of 67108865 bytes exceeds the limit of 67108864"), std::string::npos) << error;
  error = refusal("\x01"s + sized("/k") + sized("") + u64(std::uint64_t{1} << 62), v, Parse::Oversized);
  EXPECT_NE(error.find("desired value of"), std::string::npos) << error;
  error = refusal("\x05"s + u64(kMaxKeysPerRequest + 1), v, Parse::Oversized);
  EXPECT_NE(error.find("key count 1048577 exceeds the limit of 1048576"), std::string::npos) << error;
  // A lying key count allocates nothing before the keys arrive.
  refusal("\x05"s + u64(kMaxKeysPerRequest), v, Parse::NeedMore);
  // Many values, each under the limit, past the request limit together.
  std::string multi = "\x0b"s + u64(2) + sized("/a") + sized(std::string(kMaxStoreValueBytes, 'x')) + sized("/b") +
                      u64(kMaxStoreValueBytes);
  error = refusal(multi, Dialect::Validated, Parse::Oversized);
  EXPECT_NE(error.find("the request would exceed the limit of"), std::string::npos) << error;
}

TEST(TorchWire, ValueRepliesParseWithTheValueLimit) {
  std::string out, error;
  std::size_t consumed = 0;
  EXPECT_EQ(parse_bytes("\x03\0\0\0\0\0\0"s, out, consumed, error), Parse::NeedMore);
  EXPECT_EQ(parse_bytes("\x03\0\0\0\0\0\0\0va"s, out, consumed, error), Parse::NeedMore);
  ASSERT_EQ(parse_bytes("\x03\0\0\0\0\0\0\0valrest"s, out, consumed, error), Parse::Complete);
  EXPECT_EQ(out, "val");
  EXPECT_EQ(consumed, 11u);
  EXPECT_EQ(parse_bytes(u64(kMaxStoreValueBytes + 1), out, consumed, error), Parse::Oversized);
  EXPECT_NE(error.find("exceeds the limit"), std::string::npos) << error;
}

// Mutated valid requests and random bytes: the parser never reads past its input, and whatever it
// accepts re-encodes to exactly the bytes it consumed.
TEST(TorchWire, FuzzedInputIsParsedOrRefusedNeverMisread) {
  std::mt19937 rng(1913);
  for (Dialect dialect : {Dialect::V1_13, Dialect::Validated}) {
    const auto base = samples(dialect);
    for (int round = 0; round < 20000; ++round) {
      std::string bytes;
      if (round % 4 == 0) {
        bytes.resize(rng() % 40);
        for (auto& c : bytes) c = static_cast<char>(rng());
      } else {
        bytes = encode(base[rng() % base.size()], dialect);
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; i < flips; ++i) bytes[rng() % bytes.size()] = static_cast<char>(rng());
        if (rng() % 3 == 0) bytes.resize(rng() % (bytes.size() + 1));
      }
      Request q;
      std::size_t consumed = 0;
      std::string error;
      const Parse result = parse(bytes, dialect, q, consumed, error);
      if (result == Parse::Complete) {
        ASSERT_LE(consumed, bytes.size());
        ASSERT_EQ(encode(q, dialect), bytes.substr(0, consumed));
      } else if (result == Parse::Malformed || result == Parse::Oversized) {
        ASSERT_FALSE(error.empty());
      }
    }
  }
}

}  // namespace ddp::detail::torch_wire
