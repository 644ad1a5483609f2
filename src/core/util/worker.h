// A thread that runs tasks one at a time in the order they were posted. A task may also be posted
// without waking the worker (wake=false), by a caller that means to run it itself once it is next
// (run_here): that saves two thread hand-offs, most of a small collective's time (Launch::OnWait
// in ddp/process_group.h). Such a task runs when its poster calls run_here or wake(), or when the
// worker is woken for a later task; the worker never polls, it sleeps until woken.
#pragma once

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
  // `name`: the thread's name (first 15 characters), for debuggers and `top -H`.
  explicit Worker(std::string name);
  // Runs every task already posted, then joins (as stop()).
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Queues `task` (it must not throw: it reports through its Work) and returns its ticket. With
  // wake=false the worker is not woken for it: the poster must later run_here(ticket) or wake().
  std::uint64_t post(std::function<void()> task, bool wake = true);

  // Makes the worker run what is queued (a task posted with wake=false among it).
  void wake();

  // Runs task `ticket` on the calling thread if it is the next one and no task is running; false
  // (and nothing done) otherwise, and always once stop() began. Tasks still run one at a time, in
  // order: a task queued behind it is handed to the worker when it returns.
  bool run_here(std::uint64_t ticket);

  // Waits for a task running on a caller's thread, runs every task already posted, then joins.
  // Idempotent.
  void stop();

  // True while the worker thread sleeps waiting for a task (for tests).
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
  bool stopping_ = false;
  std::string name_;
  std::thread thread_;
};

}  // namespace ddp::detail
