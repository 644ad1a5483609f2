// A worker that stays stopped (SIGSTOP, state T) after every other worker of the job has exited
// is waited for by nothing: no collective is left to time out on it, and nothing will continue
// it. ddprun says so at once and, after a bound (--stopped_timeout), ends it as a failure.
// Pure: the caller observes the workers; this keeps the clock.
#pragma once

#include <chrono>
#include <optional>

namespace ddp::launcher {

// Whether this node's workers still running are stuck that way: at least one runs, every one of
// them is stopped (state T; not a debugger's t: a person at a breakpoint is there), and every
// other worker of the job has exited: this node's others (they are not running) and, with
// `other_nodes_exited`, every other node's. A job whose workers are all stopped (none exited)
// is paused, not stuck, and is left alone, as is a job of one worker.
bool stopped_alone(int running, int running_stopped, bool other_nodes_exited, int world_size);

class StoppedAloneClock {
 public:
  enum class Change {
    None,
    Began,    // it is stopped alone now (say so)
    Ended,    // it runs again, or ended (say so if it runs)
    Expired,  // stopped alone for `bound`: end it
  };
  explicit StoppedAloneClock(std::chrono::milliseconds bound) : bound_(bound) {}

  // Called at each look at the workers with what stopped_alone() said. Expired comes once per
  // stretch; Began again after an Ended.
  Change observe(bool alone, std::chrono::steady_clock::time_point now);

  std::chrono::milliseconds bound() const { return bound_; }

 private:
  std::chrono::milliseconds bound_;
  std::optional<std::chrono::steady_clock::time_point> since_;
  bool expired_ = false;
};

}  // namespace ddp::launcher
