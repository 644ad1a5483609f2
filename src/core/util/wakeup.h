// A sleep that another thread can cut short: the nccl backend's waits sleep on one, and a host
// function CUDA runs when the communication stream has passed the operation notifies it, so the
// end of device work is seen at once instead of at the next poll.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ddp::detail {

// Thread-safe. A notify() before a sleep makes that sleep (and every later one) return at once.
class Wakeup {
 public:
  void notify() {
    {
      std::lock_guard lock(mutex_);
      notified_ = true;
    }
    changed_.notify_all();
  }

  // Sleeps for `duration` at most; true when notified (before or during the sleep).
  template <typename Rep, typename Period>
  bool sleep_for(std::chrono::duration<Rep, Period> duration) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, duration, [&] { return notified_; });
  }

  bool notified() const {
    std::lock_guard lock(mutex_);
    return notified_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool notified_ = false;
};

}  // namespace ddp::detail
