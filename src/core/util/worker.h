// A thread that runs tasks one at a time in the order they were posted. A caller that would only
// wait for its task may post it without waking the worker and run it itself (run_here) when it is
// next and nothing runs: that saves the two thread hand-offs (the worker's wake-up, then the
// caller's), most of a small collective's time (ddp::issue_and_wait).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ddp::detail {

class Worker {
 public:
  // `idle_check`: how often an idle worker looks at its queue without being woken.
  explicit Worker(std::string name, std::chrono::milliseconds idle_check = kIdleCheck);
  // Runs every task already posted, then joins (as stop()).
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Tasks must not throw (they report through their Work). Returns the task's ticket. With
  // wake=false the worker is not woken for it: the poster means to run_here(ticket) or wake()
  // soon; should it not, the idle worker finds the task within kIdleCheck anyway.
  std::uint64_t post(std::function<void()> task, bool wake = true);
  static constexpr std::chrono::milliseconds kIdleCheck{20};

  // Makes the worker look at its queue (for a task posted with wake=false).
  void wake();

  // Runs task `ticket` on the calling thread if it is the next one and no task is running; false
  // (and nothing done) otherwise, and always once stop() began. Tasks still run one at a time, in order.
  bool run_here(std::uint64_t ticket);

  // Waits for a task running on a caller's thread, runs every task already posted, then joins.
  // Idempotent.
  void stop();

  // True while the worker thread waits for a task (for tests).
  bool waiting();

 private:
  struct Task {
    std::uint64_t ticket;
    std::function<void()> run;
  };
  void run();
  // Takes the first task and marks the worker busy (mutex_ held).
  std::function<void()> start_next();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> tasks_;
  std::uint64_t next_ticket_ = 0;
  bool busy_ = false;  // a task is running (here or on a caller's thread)
  bool waiting_ = false;
  const std::chrono::milliseconds idle_check_;
  bool stopping_ = false;
  std::string name_;
  std::thread thread_;
};

}  // namespace ddp::detail
