// The meaning of add and compare_set on a key-value map, shared by every store implementation
// (the TCP server, HashStore and FileStore) so that they cannot disagree.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ddp::detail {

using KeyValueMap = std::map<std::string, std::string>;

// Adds `delta` to the decimal counter at `key` (missing: 0) and returns the new value.
// Throws InvalidArgument (and changes nothing) when the key holds something other than a
// decimal integer, or when the sum does not fit in 64 bits.
std::int64_t apply_add(KeyValueMap& map, const std::string& key, std::int64_t delta);

// PyTorch's compare_set: sets `desired` when the current value equals `expected` (a missing key
// matches an empty `expected`). Returns the value afterwards; for a missing key and a non-empty
// `expected`, returns `expected`. `changed` tells whether the map was written.
std::string apply_compare_set(KeyValueMap& map, const std::string& key, const std::string& expected,
                              const std::string& desired, bool& changed);

}  // namespace ddp::detail
