#include "state_dict/safetensors_file.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail::weights {
namespace {

constexpr std::string_view kMetadata = "__metadata__";

struct Entry {
  std::string name;
  ElementType type = ElementType::Float32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
  std::uint64_t numel = 0;  // of the shape
};

// A reader of exactly the JSON a safetensors header is: an object of tensor descriptions and
// string metadata. No recursion, no values kept beyond those.
class Header {
 public:
  explicit Header(std::string_view text) : s_(text) {}

  void parse(std::vector<Entry>& entries, std::vector<std::pair<std::string, std::string>>& metadata) {
    std::set<std::string> names;
    expect('{');
    if (!consume('}')) {
      do {
        std::string key = string();
        expect(':');
        if (!names.insert(key).second) fail(cat("the name ", quote(key), " appears twice"));
        if (key == kMetadata) {
          if (!literal("null")) metadata_object(metadata);
        } else {
          entries.push_back(tensor(std::move(key)));
        }
      } while (consume(','));
      expect('}');
    }
    space();
    if (pos_ != s_.size()) fail("text after the header's closing brace");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw IOError(cat("the safetensors header is damaged: ", what, " (header byte ", pos_, ")"));
  }

  void space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume(char c) {
    space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) {
      fail(pos_ < s_.size() ? cat("expected '", c, "' but found '", s_[pos_], "'")
                            : cat("expected '", c, "' but it ends"));
    }
  }
  bool literal(std::string_view word) {
    space();
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4) fail("a \\u escape that is cut short");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("a \\u escape with a character that is not hexadecimal");
      v = (v << 4) | static_cast<unsigned>(d);
    }
    return v;
  }

  static void append_utf8(std::string& out, std::uint32_t p) {
    if (p < 0x80) {
      out.push_back(static_cast<char>(p));
    } else if (p < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (p >> 6)));
      out.push_back(static_cast<char>(0x80 | (p & 0x3F)));
    } else if (p < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (p >> 12)));
      out.push_back(static_cast<char>(0x80 | ((p >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (p & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (p >> 18)));
      out.push_back(static_cast<char>(0x80 | ((p >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((p >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (p & 0x3F)));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("a string that does not end");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) fail("a string that does not end");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/': out.push_back(e); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          std::uint32_t p = hex4();
          if (p >= 0xD800 && p <= 0xDBFF) {  // a surrogate pair
            if (s_.substr(pos_, 2) != "\\u") fail("half of a surrogate pair");
            pos_ += 2;
            const auto low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("half of a surrogate pair");
            p = 0x10000 + ((p - 0xD800) << 10) + (low - 0xDC00);
          } else if (p >= 0xDC00 && p <= 0xDFFF) {
            fail("half of a surrogate pair");
          }
          append_utf8(out, p);
          break;
        }
        default: fail(cat("the escape \\", e, " inside a string"));
      }
    }
  }

  std::int64_t integer() {
    space();
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') fail("a negative number");
    std::uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (pos_ > start && s_[start] == '0') fail("a number with a leading zero");
      const auto digit = static_cast<std::uint64_t>(s_[pos_++] - '0');
      if (v > (static_cast<std::uint64_t>(INT64_MAX) - digit) / 10) fail("a number too large");
      v = v * 10 + digit;
    }
    if (pos_ == start) fail("expected a number");
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      fail("a number that is not an integer");
    return static_cast<std::int64_t>(v);
  }

  std::vector<std::int64_t> integers(std::size_t most) {
    std::vector<std::int64_t> out;
    expect('[');
    if (consume(']')) return out;
    do {
      if (out.size() == most) fail(cat("a list of more than ", most, " numbers"));
      out.push_back(integer());
    } while (consume(','));
    expect(']');
    return out;
  }

  void metadata_object(std::vector<std::pair<std::string, std::string>>& metadata) {
    expect('{');
    if (consume('}')) return;
    std::set<std::string> keys;
    do {
      std::string key = string();
      expect(':');
      if (!keys.insert(key).second) fail(cat("the metadata key ", quote(key), " appears twice"));
      space();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail(cat("metadata ", quote(key), " is not a string"));
      metadata.emplace_back(std::move(key), string());
    } while (consume(','));
    expect('}');
  }

  Entry tensor(std::string name) {
    Entry e;
    e.name = std::move(name);
    bool dtype = false, shape = false, offsets = false;
    expect('{');
    if (!consume('}')) {
      do {
        const std::string field = string();
        expect(':');
        if (field == "dtype" && !dtype) {
          const std::string type = string();
          const auto t = from_safetensors_name(type);
          if (!t) {
            fail(cat("tensor ", quote(e.name), " has dtype ", quote(type),
                     "; ddp reads F32, F64, F16, BF16, I8, U8, I16, I32, I64 and BOOL"));
          }
          e.type = *t;
          dtype = true;
        } else if (field == "shape" && !shape) {
          e.shape = integers(kMaxDims);
          shape = true;
        } else if (field == "data_offsets" && !offsets) {
          const auto pair = integers(2);
          if (pair.size() != 2) fail(cat("tensor ", quote(e.name), "'s data_offsets are not [begin, end]"));
          e.begin = static_cast<std::uint64_t>(pair[0]);
          e.end = static_cast<std::uint64_t>(pair[1]);
          offsets = true;
        } else {
          fail(cat("tensor ", quote(e.name), " has the field ", quote(field), " twice or unknown"));
        }
      } while (consume(','));
      expect('}');
    }
    if (!dtype || !shape || !offsets) fail(cat("tensor ", quote(e.name), " lacks its dtype, shape or data_offsets"));
    return e;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

std::string json_string(std::string_view text) {
  if (!decode_utf8(text))
    throw InvalidArgument(cat("safetensors: the name or metadata ", quote(text), " is not UTF-8"));
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(c));
      out += escape;
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

Weights read_safetensors(std::string_view bytes) {
  if (bytes.size() < 8) throw IOError(cat("truncated: ", bytes.size(), " bytes, shorter than a safetensors header"));
  std::uint64_t length = 0;
  for (std::size_t i = 8; i-- > 0;) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  if (length > kMaxSafetensorsHeader) {
    throw IOError(cat("the safetensors header length is ", length, " bytes, more than the ", kMaxSafetensorsHeader,
                      " allowed: damaged, or not a safetensors file"));
  }
  if (length > bytes.size() - 8) {
    throw IOError(cat("truncated: the safetensors header length is ", length, " bytes, but only ", bytes.size() - 8,
                      " follow it"));
  }
  const std::string_view header = bytes.substr(8, static_cast<std::size_t>(length));
  const std::string_view data = bytes.substr(8 + static_cast<std::size_t>(length));
  if (!decode_utf8(header)) throw IOError("the safetensors header is damaged: it is not UTF-8");
  Weights out;
  out.format = "safetensors";
  std::vector<Entry> entries;
  Header(header).parse(entries, out.metadata);

  for (auto& e : entries) {
    const auto count = element_count(e.shape);
    if (!count || *count > (std::uint64_t{1} << 62) / element_size(e.type)) {
      throw IOError(cat("tensor ", quote(e.name), " has the shape ", shape_string(e.shape), ", which is too large"));
    }
    e.numel = *count;
    const std::uint64_t size = *count * element_size(e.type);
    if (e.begin > e.end || e.end > data.size()) {
      throw IOError(cat("tensor ", quote(e.name), "'s data_offsets [", e.begin, ", ", e.end, "] lie outside the data (",
                        data.size(), " bytes after the header): truncated or damaged"));
    }
    if (e.end - e.begin != size) {
      throw IOError(cat("tensor ", quote(e.name), " is ", name(e.type), " ", shape_string(e.shape), ", ", size,
                        " bytes, but its data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
                        ": damaged"));
    }
  }
  // Tensors in data order must cover the data exactly: no overlaps, no gaps.
  std::vector<const Entry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  for (const Entry* e : order) {
    if (e->begin != covered) {
      throw IOError(cat("tensor ", quote(e->name), " starts at data byte ", e->begin,
                        ", but the tensors before it end at ", covered,
                        e->begin < covered ? ": they overlap" : ": a gap", " (damaged)"));
    }
    covered = e->end;
  }
  if (covered != data.size()) {
    throw IOError(cat("the tensors cover ", covered, " of the ", data.size(), " data bytes: damaged"));
  }
  for (const Entry* e : order) {
    StorageRecord storage{
        e->type, e->numel,
        std::string(data.substr(static_cast<std::size_t>(e->begin), static_cast<std::size_t>(e->end - e->begin)))};
    normalize_bools(storage);
    out.storages.push_back(std::move(storage));
    out.tensors.emplace_back(e->name,
                             TensorRecord{e->type, e->shape, contiguous_strides(e->shape), 0, out.storages.size() - 1});
  }
  return out;
}

std::string write_safetensors(const Weights& weights) {
  std::string header = "{";
  if (!weights.metadata.empty()) {
    header += json_string(kMetadata) + ":{";
    for (std::size_t i = 0; i < weights.metadata.size(); ++i) {
      header += (i ? "," : "") + json_string(weights.metadata[i].first) + ":" + json_string(weights.metadata[i].second);
    }
    header += "}";
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : weights.tensors) {
    const auto& storage = weights.storages[t.storage];
    const auto count = element_count(t.sizes);
    if (t.offset != 0 || t.strides != contiguous_strides(t.sizes) || !count || *count != storage.numel ||
        storage.bytes.size() != storage.numel * element_size(storage.type)) {
      throw InvalidArgument(cat("safetensors: tensor ", quote(name), " is not the whole of a contiguous storage"));
    }
    if (name == kMetadata) throw InvalidArgument(cat("safetensors: a tensor may not be called ", kMetadata));
    std::string shape = "[";
    for (std::size_t d = 0; d < t.sizes.size(); ++d) shape += (d ? "," : "") + std::to_string(t.sizes[d]);
    header += (header.size() > 1 ? "," : "") + json_string(name) + ":{\"dtype\":\"" +
              std::string(safetensors_name(t.type)) + "\",\"shape\":" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + storage.bytes.size()) + "]}";
    offset += storage.bytes.size();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out;
  out.reserve(8 + header.size() + static_cast<std::size_t>(offset));
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(header.size()) >> (8 * i)) & 0xFF));
  out += header;
  for (const auto& [name, t] : weights.tensors) out += weights.storages[t.storage].bytes;
  return out;
}

}  // namespace ddp::detail::weights
