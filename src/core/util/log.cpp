#include "util/log.h"

#include <unistd.h>

#include <atomic>
#include <ctime>
#include <string_view>

namespace ddp::detail {
namespace {

// The log's level for the whole process, -1 until the first log line reads DDP_LOG_LEVEL (a
// constant, so it holds before any static constructor runs); set_log_level changes it.
std::atomic<int> g_log_level{-1};

}  // namespace

void read_log_level(LogSettings& s, std::string_view name, const std::string& value, VariableProblems& problems) {
  struct Word {
    std::string_view word;
    LogLevel level;
  };
  static constexpr Word kWords[] = {
      {"debug", LogLevel::Debug}, {"DEBUG", LogLevel::Debug}, {"info", LogLevel::Info},    {"INFO", LogLevel::Info},
      {"warn", LogLevel::Warn},   {"WARN", LogLevel::Warn},   {"warning", LogLevel::Warn}, {"WARNING", LogLevel::Warn},
      {"error", LogLevel::Error}, {"ERROR", LogLevel::Error}, {"off", LogLevel::Off},      {"OFF", LogLevel::Off}};
  for (const auto& w : kWords) {
    if (value == w.word) {
      s.level = w.level;
      return;
    }
  }
  problems.warnings.push_back(cat(name, "=", quote(value), " is not debug, info, warn, error or off; using warn"));
}

LogLevel log_level() {
  int level = g_log_level.load(std::memory_order_relaxed);
  if (level < 0) {
    VariableProblems ignored;  // a warning here would be a log line, which asks the level again
    int unread = -1;
    const auto read = read_variables(kLogVariables, process_env(), ignored).level;
    g_log_level.compare_exchange_strong(unread, static_cast<int>(read));
    level = g_log_level.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) { g_log_level.store(static_cast<int>(level), std::memory_order_relaxed); }

bool log_enabled(LogLevel level) { return level >= log_level(); }

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
