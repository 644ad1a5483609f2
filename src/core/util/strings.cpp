#include "util/strings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

namespace ddp::detail {

std::string format_duration(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  char text[64];
  if (ms < 1000) {
    std::snprintf(text, sizeof text, "%lld ms", static_cast<long long>(ms));
  } else if (ms < 120'000) {
    std::snprintf(text, sizeof text, "%.1f s", ms / 1000.0);
  } else {
    std::snprintf(text, sizeof text, "%.1f min", ms / 60000.0);
  }
  return text;
}

std::string join(const std::vector<int>& values, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += separator;
    out += std::to_string(values[i]);
  }
  return out;
}

std::string join(const std::vector<std::string>& values, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += separator;
    out += values[i];
  }
  return out;
}

std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t value = 0;
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string quote(std::string_view value, std::size_t max_length) {
  std::string out = "\"";
  for (std::size_t i = 0; i < value.size() && i < max_length; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (value.size() > max_length) out += "...";
  out += '"';
  return out;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace ddp::detail
