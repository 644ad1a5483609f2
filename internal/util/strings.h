// Small string helpers for building error messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::detail {

// Concatenates anything that has operator<<.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// "1.5 s", "250 ms", "30 min".
std::string format_duration(std::chrono::milliseconds duration);

// "1, 2, 5".
std::string join(const std::vector<int>& values, std::string_view separator = ", ");
std::string join(const std::vector<std::string>& values, std::string_view separator = ", ");

// Parses a whole string as a base-10 integer; nullopt on anything else (empty, junk, overflow).
std::optional<std::int64_t> parse_int(std::string_view text);

// 64-bit FNV-1a: the same text gives the same number in every process (comparing texts across
// ranks by one integer).
std::uint64_t fnv1a(std::string_view text);

// `text` in ASCII lower case.
std::string lower(std::string text);

// Quotes a value for an error message, shortening long ones and escaping non-printables.
std::string quote(std::string_view value, std::size_t max_length = 64);

}  // namespace ddp::detail
