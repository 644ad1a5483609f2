// What DDP's straggler report is made of (ddp/torch/straggler_report.h): this rank's time per
// part of its steps, added up from marks DDP sets as a step goes by. Pure (the times are given).
// Called from the training loop's thread and the autograd thread, never at once.
#pragma once

#include <chrono>
#include <cstdint>

#include "ddp/torch/straggler_report.h"

namespace ddp::detail {

class StepClock {
 public:
  using Clock = std::chrono::steady_clock;

  // A forward begins and ends. The time since the previous mark (the end of a backward, or of an
  // evaluation's forward) counts as outside DDP.
  void forward_begins(Clock::time_point t);
  void forward_ends(Clock::time_point t);
  // A backward's gradients are all computed at `computed` (from the end of forward: backward);
  // then its buckets were waited for from `wait_start` to `end`. `synchronized`: it all-reduced,
  // which ends a step (under no_sync the step goes on).
  void backward_ends(Clock::time_point computed, Clock::time_point wait_start, Clock::time_point end,
                     bool synchronized);

  // The totals of the steps ended since the previous take (a step under way stays), then zero.
  RankStepTimes take();

 private:
  static double seconds(Clock::time_point from, Clock::time_point to);

  RankStepTimes done_;     // steps ended
  RankStepTimes current_;  // the step under way
  Clock::time_point mark_{};
  Clock::time_point forward_start_{};
};

}  // namespace ddp::detail
