// What rank 0 shows while training: a progress bar redrawn in place when standard output is a
// terminal, and a plain line every few seconds otherwise (a log file, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

class Progress {
 public:
  // `images_per_step`: training images one optimizer step consumes, over all ranks;
  // `first_step`: the run's step count when it (re)started.
  Progress(bool show, int epochs, std::int64_t steps_per_epoch, std::int64_t images_per_step, std::int64_t first_step);

  // After optimizer step `step` (1-based) of `epoch` (1-based), `total_step` of the run; `loss`
  // is the mean over all ranks since the last update.
  void update(int epoch, std::int64_t step, std::int64_t total_step, double loss);
  // Ends the current bar line (before printing anything else).
  void finish_line();

 private:
  bool show_;
  bool tty_;
  int epochs_;
  std::int64_t steps_per_epoch_;
  std::int64_t images_per_step_;
  std::int64_t first_step_;
  std::chrono::steady_clock::time_point start_, last_print_;
  bool line_open_ = false;
};

// 21504 -> "21,504".
std::string with_thousands(std::int64_t n);
