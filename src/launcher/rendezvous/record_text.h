// The text of the records the nodes' agents share through the store (attempt ends, rounds): one
// field per line, so a value's '\\' and '\n' are escaped. Pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ddp/error.h"

namespace ddp::launcher {

std::string escape_field(const std::string& value);
std::string unescape_field(std::string_view value);

// Calls `field(key, value)` for each "key=value" line of `text` after its first `skip`
// characters (the header), the value still escaped; a line without '=' throws bad("a line
// without '='").
void for_each_field(const std::string& text, std::size_t skip, const std::function<Error(const std::string&)>& bad,
                    const std::function<void(std::string_view key, std::string_view value)>& field);

// A time as milliseconds since the epoch, and back.
std::int64_t to_millis(std::chrono::system_clock::time_point time);
std::chrono::system_clock::time_point from_millis(std::int64_t millis);

}  // namespace ddp::launcher
