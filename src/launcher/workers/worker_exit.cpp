#include "workers/worker_exit.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#include "util/strings.h"

namespace ddp::launcher {

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  if (abbrev) return std::string("SIG") + abbrev;
  return detail::cat("signal ", signal);
}

std::string WorkerExit::status() const {
  if (signal != 0) return detail::cat("signal ", signal_name(signal), " (", signal, ")");
  return detail::cat("exit code ", exit_code);
}

std::string format_time(std::chrono::system_clock::time_point time) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

}  // namespace ddp::launcher
