// Logging to stderr, one whole line per call (never interleaved mid-line with other threads).
// DDP_LOG_LEVEL=debug|info|warn|error|off chooses what is printed (default: warn), read at the
// process's first log line; set_log_level changes it.
#pragma once

#include <string>

#include "util/strings.h"
#include "util/variables.h"

namespace ddp::detail {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

struct LogSettings {
  LogLevel level = LogLevel::Warn;
};
void read_log_level(LogSettings& s, std::string_view name, const std::string& value, VariableProblems& problems);
inline constexpr Variable<LogSettings> kLogVariables[] = {
    {"DDP_LOG_LEVEL", "debug, info, warn (default), error, off", read_log_level},
};

// The level of the process's log: DDP_LOG_LEVEL as the process's first log line found it, or what
// set_log_level set since. Thread-safe.
LogLevel log_level();
void set_log_level(LogLevel level);

bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, const Args&... args) {
  if (log_enabled(level)) log_line(level, cat(args...));
}

}  // namespace ddp::detail
