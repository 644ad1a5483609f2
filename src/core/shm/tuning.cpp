#include "shm/tuning.h"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "ddp/detail/log.h"
#include "ddp/detail/strings.h"

namespace ddp::detail::shm {
namespace {

// A non-negative integer variable, or nullopt when unset; malformed values warn and are ignored.
std::optional<std::int64_t> read_int(const char* name, std::int64_t min, std::int64_t max) {
  const char* raw = std::getenv(name);
  if (!raw || !*raw) return std::nullopt;
  auto value = parse_int(raw);
  if (!value || *value < min || *value > max) {
    log(LogLevel::Warn, name, "=", quote(raw), " is not an integer from ", min, " to ", max, "; using the default");
    return std::nullopt;
  }
  return value;
}

}  // namespace

Tuning Tuning::from_env() {
  Tuning t;
  if (const char* raw = std::getenv("DDP_SHM")) {
    std::string_view v = raw;
    t.enabled = !(v == "0" || v == "off" || v == "OFF" || v == "false" || v == "FALSE" || v == "no" || v == "NO");
  }
  if (auto v = read_int("DDP_SHM_CHUNK_BYTES", 4096, 64 << 20))
    t.chunk_bytes = (static_cast<std::size_t>(*v) + 4095) / 4096 * 4096;
  if (auto v = read_int("DDP_SHM_SMALL_BYTES", 0, 64 << 20)) t.small_bytes = static_cast<std::size_t>(*v);
  if (auto v = read_int("DDP_SHM_STRIPE_BYTES", 0, std::int64_t{1} << 40))
    t.stripe_bytes = static_cast<std::size_t>(*v);
  if (auto v = read_int("DDP_SHM_STRIPE_CHUNK_BYTES", 0, std::int64_t{1} << 40))
    t.stripe_chunk_bytes = static_cast<std::size_t>(*v);
  if (auto v = read_int("DDP_SHM_GATHER_CHUNK_BYTES", 0, std::int64_t{1} << 40)) {
    t.gather_chunk_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = read_int("DDP_SHM_GATHER_STRIPE_BYTES", 0, std::int64_t{1} << 40)) {
    t.gather_stripe_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = read_int("DDP_GLOO_DOUBLING_BYTES", 0, std::int64_t{1} << 40)) {
    t.gloo_doubling_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = read_int("DDP_SHM_SPIN_US", 0, 1000000)) t.spin = std::chrono::microseconds(*v);
  if (const char* id = std::getenv("DDP_SHM_HOST_ID")) t.host_id = id;
  return t;
}

}  // namespace ddp::detail::shm
