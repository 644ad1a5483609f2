#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace {

std::string clock_text(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  return text;
}

}  // namespace

Progress::Progress(bool show, int epochs, std::int64_t steps_per_epoch, std::int64_t images_per_step,
                   std::int64_t first_step)
    : show_(show),
      tty_(::isatty(STDOUT_FILENO) == 1),
      epochs_(epochs),
      steps_per_epoch_(steps_per_epoch),
      images_per_step_(images_per_step),
      first_step_(first_step),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

void Progress::update(int epoch, std::int64_t step, std::int64_t total_step, double loss) {
  if (!show_) return;
  const std::int64_t steps_seen = total_step - first_step_;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(steps_seen * images_per_step_) / elapsed : 0;
  const std::int64_t left = (epochs_ - epoch) * steps_per_epoch_ + (steps_per_epoch_ - step);
  const double eta = steps_seen > 0 ? elapsed / static_cast<double>(steps_seen) * static_cast<double>(left) : 0;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * step / std::max<std::int64_t>(steps_per_epoch_, 1));
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ');
    std::printf("\repoch %d/%d [%s] %lld/%lld  %.0f img/s  loss %.4f  ETA %s   ", epoch, epochs_, bar.c_str(),
                static_cast<long long>(step), static_cast<long long>(steps_per_epoch_), rate, loss,
                clock_text(eta).c_str());
    line_open_ = true;
  } else if (std::chrono::duration<double>(now - last_print_).count() >= 5 || step == steps_per_epoch_) {
    std::printf("epoch %d/%d step %lld/%lld  %.0f img/s  loss %.4f  ETA %s\n", epoch, epochs_,
                static_cast<long long>(step), static_cast<long long>(steps_per_epoch_), rate, loss,
                clock_text(eta).c_str());
    last_print_ = now;
  }
  std::fflush(stdout);
}

void Progress::finish_line() {
  if (line_open_) std::printf("\n");
  line_open_ = false;
}

std::string with_thousands(std::int64_t n) {
  // Appends in order rather than inserting commas: g++ 12 warns (-Wrestrict, a false positive) on
  // string::insert here. The magnitude is unsigned so that the most negative value has one too.
  const std::uint64_t magnitude = n < 0 ? 0 - static_cast<std::uint64_t>(n) : static_cast<std::uint64_t>(n);
  const std::string digits = std::to_string(magnitude);
  std::string text = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}
