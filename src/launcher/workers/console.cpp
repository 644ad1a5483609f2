#include "workers/console.h"

#include "workers/worker_output.h"

namespace ddp::launcher {

namespace {

constexpr std::string_view kClearLine = "\r\033[K";  // back to column 0, erase to the end of the line

}  // namespace

void Console::line(int fd, std::string_view text) {
  scratch_.clear();
  if (live_fd_ >= 0) write_fully(live_fd_, kClearLine);
  scratch_.append(text);
  scratch_.push_back('\n');
  write_fully(fd, scratch_);
  if (live_fd_ >= 0) write_fully(live_fd_, live_);
}

void Console::live(int fd, std::string_view text) {
  if (live_fd_ == fd && live_ == text) return;
  scratch_.assign(kClearLine);
  scratch_.append(text);
  write_fully(fd, scratch_);
  live_fd_ = fd;
  live_.assign(text);
}

void Console::end_live(int fd, std::string_view text) {
  scratch_.assign(kClearLine);
  scratch_.append(text);
  scratch_.push_back('\n');
  write_fully(fd, scratch_);
  live_fd_ = -1;
  live_.clear();
}

}  // namespace ddp::launcher
