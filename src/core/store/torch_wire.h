// PyTorch's TCPStore wire protocol (torch.distributed.TCPStore), as PyTorch 1.13 speaks it, and
// the handshake-first dialect of later 2.x releases. Encoding and parsing are pure functions of
// bytes, like wire.h, shared by the server, ddp's Torch-protocol client, the tests and a fuzzer.
// docs/STORE_PROTOCOL.md describes the protocol and where each fact comes from.
//
// The protocol has no frames: a request is a query byte followed by fields, each either a fixed
// little-endian integer or a size-prefixed run of bytes (a uint64 size, then the bytes), and the
// server answers some queries with one such field. Nothing in it names a job or a rank.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/wire.h"

namespace ddp::detail::torch_wire {

// Newer (2.x) clients open each connection with VALIDATE (query byte 0) and this number.
inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;
// The largest request the server reads (declared sizes past it are refused before the bytes
// arrive): the same bound as a ddp frame, which covers the largest key and value.
inline constexpr std::size_t kMaxRequestBytes = wire::kMaxFrameBytes;
// The most keys one CHECK, WAIT, MULTI_GET or MULTI_SET may name.
inline constexpr std::uint64_t kMaxKeysPerRequest = std::uint64_t{1} << 20;
// PyTorch's client puts this before every key it is given (but not before its own "init/").
inline constexpr std::string_view kKeyPrefix = "/";

// Which numbering of queries a connection uses.
enum class Dialect : std::uint8_t {
  // PyTorch 1.13: SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6,
  // WATCH_KEY=7, DELETE_KEY=8; no handshake. The releases between 1.13 and the VALIDATE
  // handshake appended APPEND=9, MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12, also served.
  V1_13,
  // PyTorch 2.x with the handshake: the first query is VALIDATE (0) with kValidationMagic,
  // then SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6, GETNUMKEYS=7, DELETE_KEY=8,
  // APPEND=9, MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12, PING=13; no WATCH_KEY.
  Validated,
};

// What a connection's first bytes say it is.
enum class Opening {
  NeedMore,        // too few bytes to tell
  Ddp,             // ddp's preamble, wire::kPreamble
  Torch,           // a PyTorch 1.13 query (V1_13)
  TorchValidated,  // a PyTorch 2.x VALIDATE with the magic number
  Unknown,         // neither: an HTTP probe, a port scanner, a newer PyTorch, ...
};
Opening classify_opening(std::string_view first_bytes);

enum class Query : std::uint8_t {
  Set,         // key, value                -> (no reply)
  CompareSet,  // key, value (expected), value2 (desired) -> bytes
  Get,         // key                       -> bytes (the key must exist)
  Add,         // key, number (delta)       -> int64
  Check,       // keys                      -> uint8 CheckReply
  Wait,        // keys                      -> uint8 WaitReply, once every key exists
  GetNumKeys,  //                           -> int64
  WatchKey,    // key (1.13 only)           -> uint8 CallbackRegistered, then events
  DeleteKey,   // key                       -> int64 (0 or 1)
  Validate,    // nonce (the magic; 2.x)    -> (no reply)
  Append,      // key, value (after 1.13)   -> (no reply)
  MultiGet,    // keys (after 1.13)         -> one bytes per key (each must exist)
  MultiSet,    // keys, values (after 1.13) -> (no reply)
  CancelWait,  // (after 1.13)              -> uint8 WaitCanceled
  Ping,        // nonce (2.x)               -> uint32 (the nonce)
};

struct Request {
  Query query = Query::GetNumKeys;
  std::string key;
  std::string value;
  std::string value2;
  std::int64_t number = 0;
  std::uint32_t nonce = 0;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // MultiSet: one per key
};

// The query byte of `query` in `dialect`; false when the dialect has no such query.
bool query_code(Query query, Dialect dialect, std::uint8_t& code);

// A whole request as a client sends it. Throws InvalidArgument when the dialect lacks the query.
std::string encode(const Request& request, Dialect dialect);

using Parse = wire::Parse;

// Parses one request from the front of `bytes`. On Complete, `consumed` is its size. NeedMore
// until every field has arrived. Oversized when a declared size passes a limit (kMaxStoreKeyBytes,
// kMaxStoreValueBytes, kMaxKeysPerRequest, kMaxRequestBytes) even before the bytes arrive;
// Malformed for an unknown query byte or a wrong magic number. `error` says what is wrong.
Parse parse(std::string_view bytes, Dialect dialect, Request& out, std::size_t& consumed, std::string& error);

// Replies.
enum class CheckReply : std::uint8_t { Ready = 0, NotReady = 1 };
enum class WaitReply : std::uint8_t { StopWaiting = 0, WaitCanceled = 1 };
// 1.13's watch_key: events sent on the connection that registered the watch.
enum class WatchEvent : std::uint8_t { KeyUpdated = 0, KeyCreated = 1, KeyDeleted = 2, CallbackRegistered = 3 };

std::string encode_bytes(std::string_view value);  // uint64 size, then the bytes
std::string encode_int64(std::int64_t value);
std::string encode_uint32(std::uint32_t value);
std::string encode_check(CheckReply reply);
std::string encode_wait(WaitReply reply);
std::string encode_watch_registered();
// An event: the type, then the key, the old value and the new value, each size-prefixed (a
// created key has an empty old value, a deleted one an empty new value).
std::string encode_watch_event(WatchEvent event, std::string_view key, std::string_view old_value,
                               std::string_view new_value);

// Client side: parses a size-prefixed value (a GET or COMPARE_SET reply) from the front of
// `bytes`. Oversized (with `error`) when the declared size passes kMaxStoreValueBytes.
Parse parse_bytes(std::string_view bytes, std::string& out, std::size_t& consumed, std::string& error);

std::string_view to_string(Query query);
std::string_view to_string(Dialect dialect);

}  // namespace ddp::detail::torch_wire
