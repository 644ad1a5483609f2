#include "store/torch_wire.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "util/strings.h"

namespace ddp::detail::torch_wire {
namespace {

// The query at each code, per dialect (PyTorch's enum QueryType : uint8_t, in order). 1.13 has
// codes 0 to 8; the releases after it appended 9 to 12 before the VALIDATE renumbering.
constexpr std::array kV113Codes = {Query::Set,       Query::CompareSet, Query::Get,        Query::Add,
                                   Query::Check,     Query::Wait,       Query::GetNumKeys, Query::WatchKey,
                                   Query::DeleteKey, Query::Append,     Query::MultiGet,   Query::MultiSet,
                                   Query::CancelWait};
constexpr std::array kValidatedCodes = {Query::Validate,   Query::Set,    Query::CompareSet, Query::Get,
                                        Query::Add,        Query::Check,  Query::Wait,       Query::GetNumKeys,
                                        Query::DeleteKey,  Query::Append, Query::MultiGet,   Query::MultiSet,
                                        Query::CancelWait, Query::Ping};

template <std::size_t N>
bool find_code(const std::array<Query, N>& codes, Query query, std::uint8_t& code) {
  for (std::size_t i = 0; i < N; ++i) {
    if (codes[i] == query) {
      code = static_cast<std::uint8_t>(i);
      return true;
    }
  }
  return false;
}

bool query_of(std::uint8_t code, Dialect dialect, Query& query) {
  if (dialect == Dialect::V1_13) {
    if (code >= kV113Codes.size()) return false;
    query = kV113Codes[code];
  } else {
    if (code >= kValidatedCodes.size()) return false;
    query = kValidatedCodes[code];
  }
  return true;
}

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void sized(std::string_view s) {
    u64(s.size());
    out_.append(s.data(), s.size());
  }
  std::string take() { return std::move(out_); }

 private:
  // Host order: PyTorch sends its integers as they lie in memory, little-endian on every host we run on.
  void raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

// Reads fields from the front of a byte stream that may stop anywhere.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool ok() const { return state_ == Parse::Complete; }
  Parse state() const { return state_; }
  const std::string& error() const { return error_; }
  std::size_t position() const { return pos_; }

  std::uint8_t u8() { return fixed<std::uint8_t>(); }
  std::uint32_t u32() { return fixed<std::uint32_t>(); }
  std::uint64_t u64() { return fixed<std::uint64_t>(); }
  std::int64_t i64() { return fixed<std::int64_t>(); }

  std::string sized(std::size_t limit, const char* what) {
    const std::uint64_t size = u64();
    if (!ok()) return {};
    if (size > limit) {
      fail(Parse::Oversized, cat(what, " of ", size, " bytes exceeds the limit of ", limit));
      return {};
    }
    if (size > kMaxRequestBytes - pos_) {
      fail(Parse::Oversized, cat("the request would exceed the limit of ", kMaxRequestBytes, " bytes"));
      return {};
    }
    if (size > bytes_.size() - pos_) {
      state_ = Parse::NeedMore;
      return {};
    }
    std::string s(bytes_.substr(pos_, size));
    pos_ += size;
    return s;
  }

  std::uint64_t count(const char* what) {
    const std::uint64_t n = u64();
    if (ok() && n > kMaxKeysPerRequest) {
      fail(Parse::Oversized, cat(what, " count ", n, " exceeds the limit of ", kMaxKeysPerRequest));
    }
    return ok() ? n : 0;
  }

  std::vector<std::string> keys() {
    const std::uint64_t n = count("key");
    std::vector<std::string> out;
    // Each key takes at least 8 bytes: a lying count cannot make us allocate more than arrived.
    out.reserve(std::min<std::uint64_t>(n, (bytes_.size() - pos_) / 8));
    for (std::uint64_t i = 0; i < n && ok(); ++i) out.push_back(sized(kMaxStoreKeyBytes, "key"));
    return out;
  }

  void fail(Parse state, std::string message) {
    if (!ok()) return;
    state_ = state;
    error_ = std::move(message);
  }

 private:
  template <typename T>
  T fixed() {
    T v{};
    if (!ok()) return v;
    if (sizeof(T) > kMaxRequestBytes - pos_) {
      fail(Parse::Oversized, cat("the request would exceed the limit of ", kMaxRequestBytes, " bytes"));
      return v;
    }
    if (bytes_.size() - pos_ < sizeof(T)) {
      state_ = Parse::NeedMore;
      return v;
    }
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view bytes_;
  std::size_t pos_ = 0;
  Parse state_ = Parse::Complete;
  std::string error_;
};

std::string single_byte(std::uint8_t v) { return std::string(1, static_cast<char>(v)); }

}  // namespace

Opening classify_opening(std::string_view bytes) {
  if (bytes.empty()) return Opening::NeedMore;
  const auto first = static_cast<std::uint8_t>(bytes[0]);
  if (first == static_cast<std::uint8_t>(wire::kPreamble[0])) {
    const std::size_t n = std::min(bytes.size(), wire::kPreamble.size());
    if (bytes.substr(0, n) != wire::kPreamble.substr(0, n)) return Opening::Unknown;
    return n < wire::kPreamble.size() ? Opening::NeedMore : Opening::Ddp;
  }
  if (first == 0) {
    // VALIDATE (2.x) or SET (1.13). A 1.13 SET whose key length began with the magic number
    // would name a key of over 1 GB, which no server accepts: the magic decides.
    if (bytes.size() < 5) return Opening::NeedMore;
    std::uint32_t magic = 0;
    std::memcpy(&magic, bytes.data() + 1, 4);
    return magic == kValidationMagic ? Opening::TorchValidated : Opening::Torch;
  }
  if (first < kV113Codes.size()) return Opening::Torch;
  return Opening::Unknown;
}

bool query_code(Query query, Dialect dialect, std::uint8_t& code) {
  return dialect == Dialect::V1_13 ? find_code(kV113Codes, query, code) : find_code(kValidatedCodes, query, code);
}

std::string encode(const Request& q, Dialect dialect) {
  std::uint8_t code = 0;
  if (!query_code(q.query, dialect, code)) {
    throw InvalidArgument(
        cat("the PyTorch store protocol (", to_string(dialect), ") has no ", to_string(q.query), " query"));
  }
  Writer w;
  w.u8(code);
  switch (q.query) {
    case Query::Set:
    case Query::Append:
      w.sized(q.key);
      w.sized(q.value);
      break;
    case Query::CompareSet:
      w.sized(q.key);
      w.sized(q.value);
      w.sized(q.value2);
      break;
    case Query::Get:
    case Query::WatchKey:
    case Query::DeleteKey: w.sized(q.key); break;
    case Query::Add:
      w.sized(q.key);
      w.i64(q.number);
      break;
    case Query::Check:
    case Query::Wait:
    case Query::MultiGet:
      w.u64(q.keys.size());
      for (const auto& key : q.keys) w.sized(key);
      break;
    case Query::MultiSet:
      w.u64(q.keys.size());
      for (std::size_t i = 0; i < q.keys.size(); ++i) {
        w.sized(q.keys[i]);
        w.sized(i < q.values.size() ? std::string_view(q.values[i]) : std::string_view());
      }
      break;
    case Query::Validate:
    case Query::Ping: w.u32(q.nonce); break;
    case Query::GetNumKeys:
    case Query::CancelWait: break;
  }
  return w.take();
}

Parse parse(std::string_view bytes, Dialect dialect, Request& q, std::size_t& consumed, std::string& error) {
  q = Request{};
  if (bytes.empty()) return Parse::NeedMore;
  Reader r(bytes);
  const std::uint8_t code = r.u8();
  if (!query_of(code, dialect, q.query)) {
    error = cat("unknown query byte ", static_cast<int>(code), " for the ", to_string(dialect), " protocol");
    return Parse::Malformed;
  }
  switch (q.query) {
    case Query::Set:
    case Query::Append:
      q.key = r.sized(kMaxStoreKeyBytes, "key");
      q.value = r.sized(kMaxStoreValueBytes, "value");
      break;
    case Query::CompareSet:
      q.key = r.sized(kMaxStoreKeyBytes, "key");
      q.value = r.sized(kMaxStoreValueBytes, "expected value");
      q.value2 = r.sized(kMaxStoreValueBytes, "desired value");
      break;
    case Query::Get:
    case Query::WatchKey:
    case Query::DeleteKey: q.key = r.sized(kMaxStoreKeyBytes, "key"); break;
    case Query::Add:
      q.key = r.sized(kMaxStoreKeyBytes, "key");
      q.number = r.i64();
      break;
    case Query::Check:
    case Query::Wait:
    case Query::MultiGet: q.keys = r.keys(); break;
    case Query::MultiSet: {
      const std::uint64_t n = r.count("key");
      for (std::uint64_t i = 0; i < n && r.ok(); ++i) {
        q.keys.push_back(r.sized(kMaxStoreKeyBytes, "key"));
        q.values.push_back(r.sized(kMaxStoreValueBytes, "value"));
      }
      break;
    }
    case Query::Validate:
      q.nonce = r.u32();
      if (r.ok() && q.nonce != kValidationMagic) {
        char text[32];
        std::snprintf(text, sizeof text, "0x%08X", q.nonce);
        r.fail(Parse::Malformed, cat("VALIDATE carries ", text, " instead of the magic number 0x3C85F7CE"));
      }
      break;
    case Query::Ping: q.nonce = r.u32(); break;
    case Query::GetNumKeys:
    case Query::CancelWait: break;
  }
  if (!r.ok()) {
    if (r.state() != Parse::NeedMore) error = r.error();
    return r.state();
  }
  consumed = r.position();
  return Parse::Complete;
}

std::string encode_bytes(std::string_view value) {
  Writer w;
  w.sized(value);
  return w.take();
}

std::string encode_int64(std::int64_t value) {
  Writer w;
  w.i64(value);
  return w.take();
}

std::string encode_uint32(std::uint32_t value) {
  Writer w;
  w.u32(value);
  return w.take();
}

std::string encode_check(CheckReply reply) { return single_byte(static_cast<std::uint8_t>(reply)); }
std::string encode_wait(WaitReply reply) { return single_byte(static_cast<std::uint8_t>(reply)); }
std::string encode_watch_registered() { return single_byte(static_cast<std::uint8_t>(WatchEvent::CallbackRegistered)); }

std::string encode_watch_event(WatchEvent event, std::string_view key, std::string_view old_value,
                               std::string_view new_value) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(event));
  w.sized(key);
  w.sized(old_value);
  w.sized(new_value);
  return w.take();
}

Parse parse_bytes(std::string_view bytes, std::string& out, std::size_t& consumed, std::string& error) {
  Reader r(bytes);
  out = r.sized(kMaxStoreValueBytes, "value");
  if (!r.ok()) {
    if (r.state() != Parse::NeedMore) error = r.error();
    return r.state();
  }
  consumed = r.position();
  return Parse::Complete;
}

std::string_view to_string(Query query) {
  switch (query) {
    case Query::Set: return "SET";
    case Query::CompareSet: return "COMPARE_SET";
    case Query::Get: return "GET";
    case Query::Add: return "ADD";
    case Query::Check: return "CHECK";
    case Query::Wait: return "WAIT";
    case Query::GetNumKeys: return "GETNUMKEYS";
    case Query::WatchKey: return "WATCH_KEY";
    case Query::DeleteKey: return "DELETE_KEY";
    case Query::Validate: return "VALIDATE";
    case Query::Append: return "APPEND";
    case Query::MultiGet: return "MULTI_GET";
    case Query::MultiSet: return "MULTI_SET";
    case Query::CancelWait: return "CANCEL_WAIT";
    case Query::Ping: return "PING";
  }
  return "UNKNOWN";
}

std::string_view to_string(Dialect dialect) {
  return dialect == Dialect::V1_13 ? "PyTorch 1.13" : "PyTorch 2.x (VALIDATE)";
}

}  // namespace ddp::detail::torch_wire
