#include "ddp/detail/log.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <string_view>

namespace ddp::detail {
namespace {

LogLevel configured_level() {
  const char* value = std::getenv("DDP_LOG_LEVEL");
  if (!value) return LogLevel::Warn;
  const std::string_view v = value;
  if (v == "debug" || v == "DEBUG") return LogLevel::Debug;
  if (v == "info" || v == "INFO") return LogLevel::Info;
  if (v == "error" || v == "ERROR") return LogLevel::Error;
  if (v == "off" || v == "OFF") return LogLevel::Off;
  return LogLevel::Warn;
}

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = configured_level();
  return level >= threshold;
}

void log_line(LogLevel level, const std::string& message) {
  static constexpr const char* kNames[] = {"D", "I", "W", "E"};
  std::time_t now = std::time(nullptr);
  std::tm parts{};
  localtime_r(&now, &parts);
  char stamp[16];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &parts);
  std::string line = cat("[ddp ", kNames[static_cast<int>(level)], " ", stamp, " pid ", getpid(), "] ", message, "\n");
  // One write(2) per line: lines from different threads and processes never mix.
  [[maybe_unused]] auto written = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace ddp::detail
