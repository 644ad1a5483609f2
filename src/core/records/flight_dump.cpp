#include "records/flight_dump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr std::string_view kMagic = "ddp-flight-recorder";
// 2: a "failure" line after "reason"; 3: each group's backend spec and each entry's backend.
// Versions 1 and 2 are read too.
constexpr int kVersion = 3;

// ---- Strings in the text form: one word each. Bytes other than these are %XX; "" is "-".
bool is_plain(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("_.:/+@,=<>()#[]-").find(static_cast<char>(c)) != std::string_view::npos;
}

std::string escape(std::string_view text) {
  if (text.empty()) return "-";
  if (text == "-") return "%2D";
  std::string out;
  for (unsigned char c : text) {
    if (is_plain(c)) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

template <typename Enum, std::size_t N>
std::optional<Enum> enum_named(std::string_view name, const Enum (&values)[N]) {
  for (Enum v : values) {
    if (to_string(v) == name) return v;
  }
  return std::nullopt;
}

constexpr OpType kOps[] = {OpType::AllReduce, OpType::Broadcast, OpType::Reduce,        OpType::AllGather,
                           OpType::Gather,    OpType::Scatter,   OpType::ReduceScatter, OpType::AllToAll,
                           OpType::Barrier,   OpType::Send,      OpType::Recv};
constexpr DataType kTypes[] = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16,
                               DataType::Int8,    DataType::UInt8,   DataType::Int32,   DataType::Int64};
constexpr ReduceOp kReduceOps[] = {ReduceOp::SUM, ReduceOp::AVG,  ReduceOp::PRODUCT, ReduceOp::MIN,
                                   ReduceOp::MAX, ReduceOp::BAND, ReduceOp::BOR,     ReduceOp::BXOR};
constexpr FlightState kStates[] = {FlightState::Issued, FlightState::Started, FlightState::Finished,
                                   FlightState::Failed};

// Reads the text line by line and word by word; every fault names the source and the line.
class Reader {
 public:
  Reader(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  [[noreturn]] void fail(const std::string& fault) const {
    throw IOError(cat("flight recorder dump ", source_, ": line ", line_number_, ": ", fault));
  }

  bool at_end() const { return pos_ >= text_.size(); }

  // The next line, split into words (single spaces; no empty words).
  std::vector<std::string_view> next_line(std::string_view expecting) {
    if (at_end()) {
      throw IOError(cat("flight recorder dump ", source_, ": truncated after line ", line_number_, " (expected ",
                        expecting, "; a dump ends with an \"end\" line). The process may have died while writing it."));
    }
    ++line_number_;
    const auto newline = text_.find('\n', pos_);
    if (newline == std::string_view::npos) fail(cat("the line has no end (expected ", expecting, ")"));
    std::string_view line = text_.substr(pos_, newline - pos_);
    pos_ = newline + 1;
    std::vector<std::string_view> words;
    std::size_t start = 0;
    while (start <= line.size()) {
      const auto space = line.find(' ', start);
      const auto end = space == std::string_view::npos ? line.size() : space;
      if (end == start) fail(cat("an empty field in ", quote(line), " (expected ", expecting, ")"));
      words.push_back(line.substr(start, end - start));
      if (space == std::string_view::npos) break;
      start = space + 1;
    }
    return words;
  }

  // A "name value..." line with exactly `fields` values after the name.
  std::vector<std::string_view> field(std::string_view name, std::size_t fields) {
    auto words = next_line(cat("\"", name, "\""));
    if (words[0] != name) fail(cat("expected \"", name, "\", found ", quote(words[0])));
    if (words.size() != fields + 1) {
      fail(cat("\"", name, "\" takes ", fields, " value", fields == 1 ? "" : "s", ", found ", words.size() - 1));
    }
    return {words.begin() + 1, words.end()};
  }

  template <typename Int>
  Int number(std::string_view word, std::string_view what, Int min = std::numeric_limits<Int>::min(),
             Int max = std::numeric_limits<Int>::max()) const {
    Int value{};
    const auto* end = word.data() + word.size();
    auto [ptr, ec] = std::from_chars(word.data(), end, value);
    if (ec != std::errc() || ptr != end) fail(cat(what, " is ", quote(word), ", not a number in range"));
    if (value < min || value > max) fail(cat(what, " is ", value, ", outside ", min, " to ", max));
    return value;
  }

  std::string text(std::string_view word, std::string_view what) const {
    if (word == "-") return "";
    std::string out;
    for (std::size_t i = 0; i < word.size(); ++i) {
      if (word[i] != '%') {
        out += word[i];
        continue;
      }
      const int hi = i + 2 < word.size() ? hex_digit(word[i + 1]) : -1;
      const int lo = i + 2 < word.size() ? hex_digit(word[i + 2]) : -1;
      if (hi < 0 || lo < 0) fail(cat(what, " has a bad escape (% must be followed by two hex digits): ", quote(word)));
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    return out;
  }

  template <typename Enum, std::size_t N>
  Enum named(std::string_view word, const Enum (&values)[N], std::string_view what) const {
    if (auto v = enum_named(word, values)) return *v;
    fail(cat("unknown ", what, " ", quote(word)));
  }

 private:
  std::string_view text_;
  const std::string& source_;
  std::size_t pos_ = 0;
  int line_number_ = 0;
};

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out += cat(i ? "," : "", ranks[i]);
  return out;
}

FlightGroup parse_group(Reader& in, int version) {
  auto f = in.field("group", version >= 3 ? 5 : 4);
  FlightGroup g;
  g.name = in.text(f[0], "the group's name");
  g.size = in.number<int>(f[2], "the group's size", 1);
  g.rank = in.number<int>(f[1], "the group rank", 0, g.size - 1);
  std::string_view list = f[3];
  for (std::size_t start = 0;;) {
    if (static_cast<int>(g.global_ranks.size()) == g.size) in.fail(cat("more global ranks than the group's ", g.size));
    const auto comma = list.find(',', start);
    const auto end = comma == std::string_view::npos ? list.size() : comma;
    g.global_ranks.push_back(in.number<int>(list.substr(start, end - start), "a global rank", 0));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(g.global_ranks.size()) != g.size) {
    in.fail(cat(g.global_ranks.size(), " global ranks for a group of ", g.size));
  }
  if (version >= 3) g.backend = in.text(f[4], "the group's backend");
  return g;
}

FlightEntry parse_entry(Reader& in, std::size_t groups, int version) {
  auto w = in.next_line("an entry");
  const std::size_t fields = version >= 3 ? 15 : 14;
  if (w.size() != fields) in.fail(cat("an entry has ", fields, " fields, found ", w.size()));
  FlightEntry e;
  e.op = in.named(w[0], kOps, "operation");
  e.group = in.number<std::uint32_t>(w[1], "the group index");
  if (e.group >= groups) in.fail(cat("group index ", e.group, " but the dump lists ", groups, " groups"));
  e.seq = in.number<std::uint64_t>(w[2], "the sequence number");
  e.dtype = in.named(w[3], kTypes, "element type");
  e.count = in.number<std::uint64_t>(w[4], "the element count");
  e.out_count = in.number<std::uint64_t>(w[5], "the output element count");
  if (w[6] != "-") e.reduce = in.named(w[6], kReduceOps, "reduction");
  e.root = in.number<std::int32_t>(w[7], "the root or peer", -1);
  e.tag = in.number<std::uint32_t>(w[8], "the tag");
  e.state = in.named(w[9], kStates, "state");
  e.issued_ns = in.number<std::int64_t>(w[10], "the issue time", 0);
  e.started_ns = in.number<std::int64_t>(w[11], "the start time", 0);
  e.ended_ns = in.number<std::int64_t>(w[12], "the end time", 0);
  e.frame = in.text(w[13], "the caller");
  if (version >= 3) e.backend = in.text(w[14], "the backend");
  return e;
}

}  // namespace

std::string_view to_string(FlightState state) {
  switch (state) {
    case FlightState::Issued: return "issued";
    case FlightState::Started: return "started";
    case FlightState::Finished: return "finished";
    case FlightState::Failed: return "failed";
  }
  return "unknown";
}

bool is_keyed(const FlightGroup& group) { return group.backend.find(':') != std::string::npos; }

std::string describe(const FlightEntry& entry, const FlightGroup& group) {
  std::string text = describe(to_op(entry));
  if (is_keyed(group) && !entry.backend.empty()) text += cat(" over ", entry.backend);
  return text;
}

Op to_op(const FlightEntry& e) {
  Op op;
  op.type = e.op;
  op.seq = e.seq;
  op.input = Buffer{nullptr, static_cast<std::size_t>(e.count), e.dtype};
  op.output = Buffer{nullptr, static_cast<std::size_t>(e.out_count), e.dtype};
  op.reduce_op = e.reduce.value_or(ReduceOp::SUM);
  if (e.op == OpType::Send || e.op == OpType::Recv) {
    op.peer = e.root;
    op.tag = e.tag;
  } else {
    op.root = e.root;
  }
  return op;
}

std::string encode(const FlightDump& d) {
  std::string out = cat(kMagic, " ", kVersion, "\n");
  out += cat("rank ", d.rank, "\npid ", d.pid, "\nhost ", escape(d.host), "\njob ", escape(d.job), "\nrestart ",
             d.restart, "\ntime_ns ", d.time_ns, "\nreason ", escape(d.reason), "\nfailure ",
             d.failure ? escape(encode(*d.failure)) : std::string("-"), "\ncapacity ", d.capacity, "\nrecorded ",
             d.recorded, "\ngroups ", d.groups.size(), "\n");
  for (const auto& g : d.groups) {
    out += cat("group ", escape(g.name), " ", g.rank, " ", g.size, " ", ranks_text(g.global_ranks), " ",
               escape(g.backend), "\n");
  }
  out += cat("entries ", d.entries.size(), "\n");
  for (const auto& e : d.entries) {
    out +=
        cat(to_string(e.op), " ", e.group, " ", e.seq, " ", to_string(e.dtype), " ", e.count, " ", e.out_count, " ",
            e.reduce ? to_string(*e.reduce) : std::string_view("-"), " ", e.root, " ", e.tag, " ", to_string(e.state),
            " ", e.issued_ns, " ", e.started_ns, " ", e.ended_ns, " ", escape(e.frame), " ", escape(e.backend), "\n");
  }
  return out + "end\n";
}

FlightDump parse_dump(std::string_view text, const std::string& source) {
  if (text.size() > kMaxDumpBytes) {
    throw IOError(cat("flight recorder dump ", source, ": ", text.size(), " bytes, more than the ", kMaxDumpBytes,
                      " a dump can hold; it is not a flight recorder dump"));
  }
  Reader in(text, source);
  auto head = in.next_line("the first line, \"ddp-flight-recorder <version>\"");
  if (head.size() != 2 || head[0] != kMagic) {
    in.fail(cat("not a flight recorder dump: it begins with ", quote(text.substr(0, 24)), ", not \"", kMagic, "\""));
  }
  const int version = in.number<int>(head[1], "the version");
  if (version < 1 || version > kVersion) {
    in.fail(cat("version ", version, "; this ddp reads versions 1 to ", kVersion,
                " (use the ddp-trace of the ddp that wrote it)"));
  }
  FlightDump d;
  d.rank = in.number<int>(in.field("rank", 1)[0], "the rank", 0);
  d.pid = in.number<std::int64_t>(in.field("pid", 1)[0], "the pid", 0);
  d.host = in.text(in.field("host", 1)[0], "the host");
  d.job = in.text(in.field("job", 1)[0], "the job id");
  d.restart = in.number<int>(in.field("restart", 1)[0], "the restart count", 0);
  d.time_ns = in.number<std::int64_t>(in.field("time_ns", 1)[0], "the time", 0);
  d.reason = in.text(in.field("reason", 1)[0], "the reason");
  if (version >= 2) {
    const auto word = in.field("failure", 1)[0];
    if (word != "-") {
      try {
        d.failure = decode_failure_record(in.text(word, "the failure record"));
      } catch (const IOError& e) {
        in.fail(e.what());
      }
    }
  }
  d.capacity = in.number<std::uint64_t>(in.field("capacity", 1)[0], "the capacity");
  d.recorded = in.number<std::uint64_t>(in.field("recorded", 1)[0], "the number recorded");
  // Counts are checked against what follows, line by line: nothing is reserved on their word.
  const auto groups = in.number<std::uint64_t>(in.field("groups", 1)[0], "the number of groups");
  for (std::uint64_t i = 0; i < groups; ++i) d.groups.push_back(parse_group(in, version));
  const auto entries = in.number<std::uint64_t>(in.field("entries", 1)[0], "the number of entries");
  if (entries > d.recorded) in.fail(cat(entries, " entries but only ", d.recorded, " recorded"));
  for (std::uint64_t i = 0; i < entries; ++i) d.entries.push_back(parse_entry(in, d.groups.size(), version));
  auto end = in.next_line("\"end\"");
  if (end.size() != 1 || end[0] != "end") in.fail(cat("expected \"end\" after ", entries, " entries"));
  if (!in.at_end()) in.fail("text after the \"end\" line");
  return d;
}

FlightDump read_dump(const std::string& path) {
  auto fault = [&](const std::string& what) { return IOError(cat("flight recorder dump ", path, ": ", what)); };
  // O_NONBLOCK: a FIFO in place of the file must not hang the reader.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw fault(cat("cannot open it: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISDIR(st.st_mode) ? "a folder, not a file" : "not a regular file";
    ::close(fd);
    throw fault(why);
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxDumpBytes) {
    ::close(fd);
    throw fault(
        cat(st.st_size, " bytes, more than the ", kMaxDumpBytes, " a dump can hold; it is not a flight recorder dump"));
  }
  // Bounded by the size the file has now: one that grows meanwhile is read to that size.
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw fault(cat("cannot read it: ", std::strerror(error)));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return parse_dump(text, path);
}

}  // namespace ddp::detail
