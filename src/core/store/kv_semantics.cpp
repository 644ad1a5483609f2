#include "store/kv_semantics.h"

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {

std::int64_t apply_add(KeyValueMap& map, const std::string& key, std::int64_t delta) {
  auto it = map.find(key);
  std::int64_t value = 0;
  if (it != map.end()) {
    auto parsed = parse_int(it->second);
    if (!parsed) {
      throw InvalidArgument(cat("store add(", quote(key), "): the key holds ", quote(it->second),
                                ", not an integer counter; use a key of its own for counters"));
    }
    value = *parsed;
  }
  if (__builtin_add_overflow(value, delta, &value)) {  // the delta comes from any client
    throw InvalidArgument(cat("store add(", quote(key), ", ", delta, "): the counter holds ", it->second,
                              " and the sum does not fit in 64 bits"));
  }
  map[key] = std::to_string(value);
  return value;
}

std::string apply_compare_set(KeyValueMap& map, const std::string& key, const std::string& expected,
                              const std::string& desired, bool& changed) {
  changed = false;
  auto it = map.find(key);
  if (it == map.end()) {
    if (!expected.empty()) return expected;
    map.emplace(key, desired);
    changed = true;
    return desired;
  }
  if (it->second == expected) {
    it->second = desired;
    changed = true;
  }
  return it->second;
}

}  // namespace ddp::detail
