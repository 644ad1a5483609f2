// Logging to stderr, one whole line per call (never interleaved mid-line with other threads).
// DDP_LOG_LEVEL=debug|info|warn|error|off chooses what is printed (default: warn; settings.h,
// where set_log_level changes it).
#pragma once

#include <string>

#include "ddp/detail/strings.h"

namespace ddp::detail {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, const Args&... args) {
  if (log_enabled(level)) log_line(level, cat(args...));
}

}  // namespace ddp::detail
