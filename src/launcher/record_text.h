// The text of the records the nodes' agents share through the store (attempt ends, rounds): one
// field per line, so a value's '\\' and '\n' are escaped. Pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::launcher {

std::string escape_field(const std::string& value);
std::string unescape_field(std::string_view value);

// A time as milliseconds since the epoch, and back.
std::int64_t to_millis(std::chrono::system_clock::time_point time);
std::chrono::system_clock::time_point from_millis(std::int64_t millis);

}  // namespace ddp::launcher
