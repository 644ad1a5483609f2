#include "ddp/detail/settings.h"

#include <atomic>

#include "ddp/error.h"
#include "ddp/detail/strings.h"

namespace ddp::detail {
namespace {

bool is_one_of(std::string_view value, std::initializer_list<std::string_view> words) {
  for (auto w : words) {
    if (value == w) return true;
  }
  return false;
}

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> value_of(const EnvLookup& env, std::string_view name) {
  auto value = env(std::string(name));
  if (!value || value->empty()) return std::nullopt;
  return value;
}

std::string text_of(const EnvLookup& env, std::string_view name) { return value_of(env, name).value_or(""); }

// An integer tuning variable from `min` to `max`; out of range or malformed, a warning and nullopt.
std::optional<std::int64_t> int_of(const EnvLookup& env, std::string_view name, std::int64_t min, std::int64_t max,
                                   std::vector<std::string>& warnings) {
  const auto raw = value_of(env, name);
  if (!raw) return std::nullopt;
  auto value = parse_int(*raw);
  if (!value || *value < min || *value > max) {
    warnings.push_back(
        cat(name, "=", quote(*raw), " is not an integer from ", min, " to ", max, "; using the default"));
    return std::nullopt;
  }
  return value;
}

LogLevel log_level_of(const EnvLookup& env, std::vector<std::string>& warnings) {
  const auto v = value_of(env, "DDP_LOG_LEVEL");
  if (!v) return LogLevel::Warn;
  if (is_one_of(*v, {"debug", "DEBUG"})) return LogLevel::Debug;
  if (is_one_of(*v, {"info", "INFO"})) return LogLevel::Info;
  if (is_one_of(*v, {"warn", "WARN", "warning", "WARNING"})) return LogLevel::Warn;
  if (is_one_of(*v, {"error", "ERROR"})) return LogLevel::Error;
  if (is_one_of(*v, {"off", "OFF"})) return LogLevel::Off;
  warnings.push_back(cat("DDP_LOG_LEVEL=", quote(*v), " is not debug, info, warn, error or off; using warn"));
  return LogLevel::Warn;
}

ShmSettings shm_of(const EnvLookup& env, std::vector<std::string>& warnings) {
  ShmSettings s;
  constexpr std::int64_t kTerabyte = std::int64_t{1} << 40;
  if (auto v = value_of(env, "DDP_SHM")) s.enabled = !is_one_of(*v, {"0", "off", "OFF", "false", "FALSE", "no", "NO"});
  if (auto v = int_of(env, "DDP_SHM_CHUNK_BYTES", 4096, 64 << 20, warnings)) {
    s.chunk_bytes = (static_cast<std::size_t>(*v) + 4095) / 4096 * 4096;  // whole pages
  }
  if (auto v = int_of(env, "DDP_SHM_SMALL_BYTES", 0, 64 << 20, warnings)) s.small_bytes = static_cast<std::size_t>(*v);
  if (auto v = int_of(env, "DDP_SHM_STRIPE_BYTES", 0, kTerabyte, warnings))
    s.stripe_bytes = static_cast<std::size_t>(*v);
  if (auto v = int_of(env, "DDP_SHM_STRIPE_CHUNK_BYTES", 0, kTerabyte, warnings)) {
    s.stripe_chunk_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = int_of(env, "DDP_SHM_GATHER_CHUNK_BYTES", 0, kTerabyte, warnings)) {
    s.gather_chunk_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = int_of(env, "DDP_SHM_GATHER_STRIPE_BYTES", 0, kTerabyte, warnings)) {
    s.gather_stripe_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = int_of(env, "DDP_GLOO_DOUBLING_BYTES", 0, kTerabyte, warnings)) {
    s.gloo_doubling_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = int_of(env, "DDP_SHM_SPIN_US", 0, 1000000, warnings)) s.spin = std::chrono::microseconds(*v);
  s.host_id = text_of(env, "DDP_SHM_HOST_ID");
  return s;
}

// The log's level for the whole process, -1 until the first log line reads DDP_LOG_LEVEL (a
// constant, so it holds before any static constructor runs); set_log_level changes it.
std::atomic<int> g_log_level{-1};

}  // namespace

Settings read_settings(const EnvLookup& env) {
  Settings s;
  s.log_level = log_level_of(env, s.warnings);
  if (auto v = value_of(env, "DDP_DEBUG")) s.debug = !is_one_of(*v, {"0", "OFF", "off"});
  s.shm = shm_of(env, s.warnings);
  s.socket_ifname = text_of(env, "DDP_SOCKET_IFNAME");
  if (s.socket_ifname.empty()) s.socket_ifname = text_of(env, "GLOO_SOCKET_IFNAME");
  if (auto v = value_of(env, "DDP_FLIGHT_RECORDER")) {
    const auto n = parse_int(*v);
    if (n && *n >= 0 && static_cast<std::size_t>(*n) <= kMaxFlightCapacity) {
      s.flight_capacity = static_cast<std::size_t>(*n);
    } else if (s.invalid.empty()) {
      s.invalid =
          cat("DDP_FLIGHT_RECORDER=", quote(*v), " is not a number of operations from 0 to ", kMaxFlightCapacity,
              ": set it to how many of its last collectives each rank keeps for its flight recorder dump "
              "(default ",
              kDefaultFlightCapacity, "), or 0 to turn it off");
    }
  }
  s.flight_dir = text_of(env, "DDP_FLIGHT_RECORDER_DIR");
  s.job_id = text_of(env, "DDP_JOB_ID");
  if (s.job_id.empty()) s.job_id = text_of(env, "TORCHELASTIC_RUN_ID");
  s.store_protocol = env("DDP_STORE_PROTOCOL");
  s.timeline = text_of(env, "DDP_TIMELINE");
  if (auto v = int_of(env, "DDP_BUCKET_STREAMS", 1, 2, s.warnings)) s.bucket_streams = static_cast<int>(*v);
  s.straggler_report = text_of(env, "DDP_STRAGGLER_REPORT");
  s.checkpoint_record = text_of(env, "DDP_CHECKPOINT_RECORD");
  return s;
}

Settings process_settings() { return read_settings(process_env()); }

void Settings::check() const {
  if (!invalid.empty()) throw InvalidArgument(invalid);
}

void Settings::log_warnings() const {
  for (const auto& warning : warnings) log(LogLevel::Warn, warning);
}

LogLevel log_level() {
  int level = g_log_level.load(std::memory_order_relaxed);
  if (level < 0) {
    std::vector<std::string> ignored;  // said by the groups, which read the settings again
    int unread = -1;
    g_log_level.compare_exchange_strong(unread, static_cast<int>(log_level_of(process_env(), ignored)));
    level = g_log_level.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) { g_log_level.store(static_cast<int>(level), std::memory_order_relaxed); }

}  // namespace ddp::detail
