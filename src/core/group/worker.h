// A thread that runs tasks one at a time in the order they were posted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ddp::detail {

class Worker {
 public:
  explicit Worker(std::string name);
  // Runs every task already posted, then joins.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Tasks must not throw (they report through their Work).
  void post(std::function<void()> task);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::string name_;
  std::thread thread_;
};

}  // namespace ddp::detail
