#include "reducer/step_clock.h"

namespace ddp::detail {

double StepClock::seconds(Clock::time_point from, Clock::time_point to) {
  return from == Clock::time_point{} || to < from ? 0 : std::chrono::duration<double>(to - from).count();
}

void StepClock::forward_begins(Clock::time_point t) {
  current_.outside += seconds(mark_, t);
  forward_start_ = t;
}

void StepClock::forward_ends(Clock::time_point t) {
  current_.forward += seconds(forward_start_, t);
  mark_ = t;
}

void StepClock::backward_ends(Clock::time_point computed, Clock::time_point wait_start, Clock::time_point end,
                              bool synchronized) {
  current_.backward += seconds(mark_, computed);
  current_.bucket_wait += seconds(wait_start, end);
  mark_ = end;
  if (!synchronized) return;
  done_.steps += 1;
  done_.forward += current_.forward;
  done_.backward += current_.backward;
  done_.bucket_wait += current_.bucket_wait;
  done_.outside += current_.outside;
  current_ = {};
}

RankStepTimes StepClock::take() {
  RankStepTimes taken = done_;
  done_ = {};
  return taken;
}

}  // namespace ddp::detail
