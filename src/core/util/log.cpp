#include "ddp/detail/log.h"

#include <unistd.h>

#include <ctime>
#include <string_view>

#include "ddp/detail/settings.h"

namespace ddp::detail {

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
