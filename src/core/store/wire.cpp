#include "store/wire.h"

#include <cstring>

#include "ddp/tcp_store.h"
#include "util/strings.h"

namespace ddp::detail::wire {
namespace {

class Writer {
 public:
  Writer() { out_.resize(4); }  // room for the length
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { raw(&v, 2); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void bytes(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void list(const std::vector<std::string>& items) {
    u32(static_cast<std::uint32_t>(items.size()));
    for (const auto& item : items) bytes(item);
  }
  std::string finish() {
    std::uint32_t body = static_cast<std::uint32_t>(out_.size() - 4);
    std::memcpy(out_.data(), &body, 4);  // the protocol is little-endian, as is every host we run on
    return std::move(out_);
  }

 private:
  void raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

// Reads fields from a frame body; any read past the end marks the frame malformed.
class Reader {
 public:
  explicit Reader(std::string_view body) : body_(body) {}
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == body_.size(); }
  const std::string& error() const { return error_; }

  std::uint8_t u8() { return fixed<std::uint8_t>(); }
  std::uint16_t u16() { return fixed<std::uint16_t>(); }
  std::uint32_t u32() { return fixed<std::uint32_t>(); }
  std::int64_t i64() { return fixed<std::int64_t>(); }
  std::string bytes(std::size_t limit, const char* what) {
    std::uint32_t size = u32();
    if (!ok_) return {};
    if (size > limit) return fail(cat(what, " of ", size, " bytes exceeds the limit of ", limit));
    if (size > body_.size() - pos_) return fail(cat(what, " runs past the end of the frame"));
    std::string s(body_.substr(pos_, size));
    pos_ += size;
    return s;
  }
  // Keys (each up to kMaxStoreKeyBytes) or, with `item_limit` kMaxStoreValueBytes, values.
  std::vector<std::string> list(std::size_t item_limit = kMaxStoreKeyBytes, const char* what = "key") {
    std::uint32_t count = u32();
    std::vector<std::string> items;
    if (!ok_) return items;
    // Each item takes at least 4 bytes, which bounds a lying count before we allocate for it.
    if (count > (body_.size() - pos_) / 4) {
      fail(cat(what, " count ", count, " does not fit in the frame"));
      return items;
    }
    items.reserve(count);
    for (std::uint32_t i = 0; i < count && ok_; ++i) items.push_back(bytes(item_limit, what));
    return items;
  }
  std::string fail(std::string message) {
    if (ok_) error_ = std::move(message);
    ok_ = false;
    return {};
  }

 private:
  template <typename T>
  T fixed() {
    T v{};
    if (!ok_) return v;
    if (body_.size() - pos_ < sizeof(T)) {
      fail("frame ends in the middle of a field");
      return v;
    }
    std::memcpy(&v, body_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view body_;
  std::size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
};

// Splits off one frame's body, or says why not.
Parse frame(std::string_view bytes, std::string_view& body, std::size_t& consumed, std::string& error) {
  if (bytes.size() < 4) return Parse::NeedMore;
  std::uint32_t size = 0;
  std::memcpy(&size, bytes.data(), 4);
  if (size > kMaxFrameBytes) {
    error = cat("frame of ", size, " bytes exceeds the limit of ", kMaxFrameBytes);
    return Parse::Oversized;
  }
  if (size == 0) {
    error = "empty frame";
    return Parse::Malformed;
  }
  if (bytes.size() - 4 < size) return Parse::NeedMore;
  body = bytes.substr(4, size);
  consumed = 4 + static_cast<std::size_t>(size);
  return Parse::Complete;
}

Parse finish(Reader& r, std::string& error) {
  if (r.ok() && !r.at_end()) r.fail("trailing bytes after the last field");
  if (!r.ok()) {
    error = r.error();
    return Parse::Malformed;
  }
  return Parse::Complete;
}

}  // namespace

std::string encode(const Request& q) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(q.op));
  switch (q.op) {
    case Op::Hello:
      w.u16(q.version);
      w.bytes(q.job_id);
      w.i64(static_cast<std::int64_t>(q.generation));
      w.i64(q.number);
      w.i64(q.pid);
      w.bytes(q.host);
      break;
    case Op::Set:
      w.bytes(q.key);
      w.bytes(q.value);
      break;
    case Op::Get:
      w.bytes(q.key);
      w.i64(q.number);
      break;
    case Op::Add:
      w.bytes(q.key);
      w.i64(q.number);
      break;
    case Op::CompareSet:
      w.bytes(q.key);
      w.bytes(q.value);
      w.bytes(q.value2);
      break;
    case Op::Check: w.list(q.keys); break;
    case Op::Wait:
    case Op::MultiGet:
      w.list(q.keys);
      w.i64(q.number);
      break;
    case Op::Delete: w.bytes(q.key); break;
    case Op::NumKeys:
    case Op::Bye:
    case Op::Ping: break;
  }
  return w.finish();
}

std::string encode(const Response& s) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(s.status));
  switch (s.status) {
    case Status::Ok: break;
    case Status::Value:
    case Status::Error:
    case Status::Refused:
    case Status::Later: w.bytes(s.value); break;
    case Status::Number: w.i64(s.number); break;
    case Status::Timeout: w.list(s.keys); break;
    case Status::Values: w.list(s.values); break;
  }
  return w.finish();
}

Parse parse(std::string_view bytes, Request& q, std::size_t& consumed, std::string& error) {
  std::string_view body;
  Parse p = frame(bytes, body, consumed, error);
  if (p != Parse::Complete) return p;
  Reader r(body);
  q = Request{};
  const std::uint8_t op = r.u8();
  q.op = static_cast<Op>(op);
  switch (q.op) {
    case Op::Hello:
      q.version = r.u16();
      q.job_id = r.bytes(kMaxStoreKeyBytes, "job id");
      q.generation = static_cast<std::uint64_t>(r.i64());
      q.number = r.i64();
      q.pid = r.i64();
      q.host = r.bytes(kMaxStoreKeyBytes, "host name");
      break;
    case Op::Set:
      q.key = r.bytes(kMaxStoreKeyBytes, "key");
      q.value = r.bytes(kMaxStoreValueBytes, "value");
      break;
    case Op::Get:
      q.key = r.bytes(kMaxStoreKeyBytes, "key");
      q.number = r.i64();
      break;
    case Op::Add:
      q.key = r.bytes(kMaxStoreKeyBytes, "key");
      q.number = r.i64();
      break;
    case Op::CompareSet:
      q.key = r.bytes(kMaxStoreKeyBytes, "key");
      q.value = r.bytes(kMaxStoreValueBytes, "expected value");
      q.value2 = r.bytes(kMaxStoreValueBytes, "desired value");
      break;
    case Op::Check: q.keys = r.list(); break;
    case Op::Wait:
    case Op::MultiGet:
      q.keys = r.list();
      q.number = r.i64();
      break;
    case Op::Delete: q.key = r.bytes(kMaxStoreKeyBytes, "key"); break;
    case Op::NumKeys:
    case Op::Bye:
    case Op::Ping: break;
    default: error = cat("unknown request code ", static_cast<int>(op)); return Parse::UnknownRequest;
  }
  return finish(r, error);
}

Parse parse(std::string_view bytes, Response& s, std::size_t& consumed, std::string& error) {
  std::string_view body;
  Parse p = frame(bytes, body, consumed, error);
  if (p != Parse::Complete) return p;
  Reader r(body);
  s = Response{};
  const std::uint8_t status = r.u8();
  s.status = static_cast<Status>(status);
  switch (s.status) {
    case Status::Ok: break;
    case Status::Value:
    case Status::Error:
    case Status::Refused:
    case Status::Later: s.value = r.bytes(kMaxStoreValueBytes, "value"); break;
    case Status::Number: s.number = r.i64(); break;
    case Status::Timeout: s.keys = r.list(); break;
    case Status::Values: s.values = r.list(kMaxStoreValueBytes, "value"); break;
    default:
      if (r.ok()) r.fail(cat("unknown response code ", static_cast<int>(status)));
  }
  return finish(r, error);
}

std::string_view to_string(Op op) {
  switch (op) {
    case Op::Hello: return "hello";
    case Op::Set: return "set";
    case Op::Get: return "get";
    case Op::Add: return "add";
    case Op::CompareSet: return "compare_set";
    case Op::Check: return "check";
    case Op::Wait: return "wait";
    case Op::Delete: return "delete_key";
    case Op::NumKeys: return "num_keys";
    case Op::Bye: return "bye";
    case Op::Ping: return "ping";
    case Op::MultiGet: return "multi_get";
  }
  return "unknown";
}

}  // namespace ddp::detail::wire
