#include "records/failure_record.h"

#include <algorithm>
#include <array>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr std::string_view kRecordHeader = "ddp-failure 2";
constexpr std::string_view kVersion1Header = "ddp-failure 1";  // no state field: a final record
constexpr std::array<std::string_view, 6> kKindNames = {"invalid_argument", "timeout", "peer_lost",
                                                        "mismatch",         "io",      "other"};
constexpr std::array<std::string_view, 2> kStateNames = {"provisional", "final"};
constexpr std::array<std::string_view, 13> kRecordFields = {"kind",  "state",  "rank",   "group",  "op",
                                                            "seq",   "lost",   "behind", "inside", "mismatched",
                                                            "first", "detail", "message"};

// One line per field: newlines and backslashes escaped.
std::string escaped_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string unescaped_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) throw IOError("failure record: a value ends in a lone backslash");
    if (text[i] == 'n') out += '\n';
    else if (text[i] == '\\') out += '\\';
    else throw IOError(cat("failure record: unknown escape \\", text[i]));
  }
  return out;
}

std::int64_t record_number(std::string_view field, std::string_view text) {
  auto n = parse_int(text);
  if (!n) throw IOError(cat("failure record: field ", field, " is not a number: ", quote(text)));
  return *n;
}

std::vector<int> rank_list(std::string_view field, std::string_view text) {
  std::vector<int> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const auto n = record_number(field, text.substr(0, comma));
    if (n < 0 || n > 1'000'000'000) throw IOError(cat("failure record: field ", field, " holds rank ", n));
    out.push_back(static_cast<int>(n));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) throw IOError(cat("failure record: field ", field, " ends in a comma"));
  }
  return out;
}

}  // namespace

std::string failure_record_key(int global_rank) { return "__ddp/failure/" + std::to_string(global_rank); }

std::string encode(const FailureRecord& r) {
  const auto list = [](const std::vector<int>& v) { return join(v, ","); };
  const std::array<std::string, kRecordFields.size()> values = {
      std::string(kKindNames[static_cast<std::size_t>(r.kind)]),
      std::string(kStateNames[static_cast<std::size_t>(r.state)]),
      std::to_string(r.rank),
      escaped_line(r.group),
      escaped_line(r.op),
      std::to_string(r.seq),
      list(r.lost),
      list(r.behind),
      list(r.inside),
      list(r.mismatched),
      std::to_string(r.first),
      escaped_line(r.detail),
      escaped_line(r.message)};
  std::string out(kRecordHeader);
  out += '\n';
  for (std::size_t i = 0; i < kRecordFields.size(); ++i) out += cat(kRecordFields[i], ' ', values[i], '\n');
  return out;
}

FailureRecord decode_failure_record(std::string_view text) {
  const auto line_end = [&](std::size_t from) {
    const std::size_t at = text.find('\n', from);
    if (at == std::string_view::npos) throw IOError("failure record: truncated (a line without its end)");
    return at;
  };
  std::size_t end = line_end(0);
  const bool version1 = text.substr(0, end) == kVersion1Header;
  if (text.substr(0, end) != kRecordHeader && !version1) {
    throw IOError(cat("failure record: starts with ", quote(text.substr(0, end)), ", not \"", kRecordHeader,
                      "\" (or \"", kVersion1Header, "\")"));
  }
  FailureRecord r;
  std::size_t pos = end + 1;
  for (std::string_view field : kRecordFields) {  // each field once, in this order: anything else is not a record
    if (version1 && field == "state") continue;
    end = line_end(pos);
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, field.size()) != field || line.size() == field.size() || line[field.size()] != ' ') {
      throw IOError(cat("failure record: expected field ", field, ", found ", quote(line)));
    }
    const std::string_view value = line.substr(field.size() + 1);
    if (field == "kind") {
      const auto at = std::find(kKindNames.begin(), kKindNames.end(), value);
      if (at == kKindNames.end()) throw IOError(cat("failure record: unknown kind ", quote(value)));
      r.kind = static_cast<ErrorKind>(at - kKindNames.begin());
    } else if (field == "state") {
      const auto at = std::find(kStateNames.begin(), kStateNames.end(), value);
      if (at == kStateNames.end()) throw IOError(cat("failure record: unknown state ", quote(value)));
      r.state = static_cast<FailureState>(at - kStateNames.begin());
    } else if (field == "rank") {
      r.rank = static_cast<int>(record_number(field, value));
    } else if (field == "group") {
      r.group = unescaped_line(value);
    } else if (field == "op") {
      r.op = unescaped_line(value);
    } else if (field == "seq") {
      r.seq = record_number(field, value);
    } else if (field == "lost") {
      r.lost = rank_list(field, value);
    } else if (field == "behind") {
      r.behind = rank_list(field, value);
    } else if (field == "inside") {
      r.inside = rank_list(field, value);
    } else if (field == "mismatched") {
      r.mismatched = rank_list(field, value);
    } else if (field == "first") {
      r.first = static_cast<int>(record_number(field, value));
    } else if (field == "detail") {
      r.detail = unescaped_line(value);
    } else {
      r.message = unescaped_line(value);
    }
  }
  if (pos != text.size()) throw IOError("failure record: text after its last field");
  return r;
}

std::vector<int> waited_for(const FailureRecord& record) {
  std::vector<int> out;
  for (const auto* list : {&record.lost, &record.behind, &record.inside}) {
    for (int r : *list) {
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
  }
  return out;
}

}  // namespace ddp::detail
