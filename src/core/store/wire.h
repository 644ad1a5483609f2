// The TCPStore wire protocol (docs/STORE_PROTOCOL.md): length-prefixed binary frames. Encoding
// and parsing are pure functions of bytes, shared by client, server and the fuzzer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::detail::wire {

// A client opens every connection with these 4 bytes, then frames. They tell a ddp client from
// anything else that connects (an HTTP probe, a PyTorch store client, a port scanner).
inline constexpr std::string_view kPreamble = "DDPS";
inline constexpr std::uint16_t kVersion = 1;
// A frame larger than this is refused without being read (covers the largest key and value).
inline constexpr std::size_t kMaxFrameBytes = (std::size_t{64} << 20) + (std::size_t{128} << 10);

enum class Op : std::uint8_t {
  Hello = 1,       // version, job_id, generation, rank, pid, host
  Set = 2,         // key, value
  Get = 3,         // key, timeout_ms: waits for the key
  Add = 4,         // key, number
  CompareSet = 5,  // key, value (expected), value2 (desired)
  Check = 6,       // keys
  Wait = 7,        // keys, timeout_ms
  Delete = 8,      // key
  NumKeys = 9,     //
  Bye = 10,        // (no reply) a clean goodbye: this connection's rank is not lost
  Ping = 11,       //
  MultiGet = 12,   // keys, timeout_ms: waits for every key, answers their values
};

enum class Status : std::uint8_t {
  Ok = 0,       //
  Value = 1,    // value
  Number = 2,   // number
  Timeout = 3,  // keys (those still missing)
  Error = 4,    // value (a message)
  Refused = 5,  // value (the server's job id)
  Later = 6,    // value (the server's generation): this server belongs to an earlier init; retry
  Values = 7,   // values (one per key of a multi_get, in its order)
};

struct Request {
  Op op = Op::Ping;
  std::string key;
  std::string value;
  std::string value2;
  std::int64_t number = 0;  // Add: delta; Get/Wait: timeout in ms; Hello: rank
  std::vector<std::string> keys;
  // Hello only.
  std::uint16_t version = kVersion;
  std::string job_id;
  std::uint64_t generation = 0;  // which init_process_group of the job (0: any)
  std::int64_t pid = 0;
  std::string host;
};

struct Response {
  Status status = Status::Ok;
  std::string value;
  std::int64_t number = 0;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // Values
};

// A whole frame: 4-byte little-endian length, then the body.
std::string encode(const Request& request);
std::string encode(const Response& response);

enum class Parse { Complete, NeedMore, Malformed, Oversized, UnknownRequest };

// Parses one frame from the front of `bytes`. On Complete, `consumed` is the frame's size. On
// Malformed or Oversized, `error` says what is wrong. UnknownRequest: a well-framed request whose
// code this version does not know (a newer client's): `consumed` covers it, so the server can
// answer it with an error and go on. Never reads past `bytes`.
Parse parse(std::string_view bytes, Request& out, std::size_t& consumed, std::string& error);
Parse parse(std::string_view bytes, Response& out, std::size_t& consumed, std::string& error);

std::string_view to_string(Op op);

}  // namespace ddp::detail::wire
