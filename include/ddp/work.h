// ddp::Work: the handle of an asynchronous operation (torch.distributed's Work).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ddp {

class Work {
 public:
  // `description` names the operation in errors, e.g. "all_reduce #12 in group 'world'".
  explicit Work(std::string description);
  // The same, built by `describe` when first asked for (by an error, a log line or the caller):
  // formatting a name for every operation would cost more than a small collective itself.
  explicit Work(std::function<std::string()> describe);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the operation finished; rethrows its error (a ddp::Error) if it failed. Every
  // operation is bounded by its group's timeout, so this returns or throws in bounded time. An
  // operation issued with Launch::OnWait (ddp/process_group.h) that has not started yet starts
  // now, on this thread when nothing is queued before it.
  void wait();

  // As wait(), but throws TimeoutError (naming the operation and, for collectives, the ranks
  // that had not reached it) if it has not finished within `timeout`. The operation itself goes on.
  // A Launch::OnWait operation not started yet is handed to the group's worker thread.
  void wait(std::chrono::milliseconds timeout);

  // Does not block. A Launch::OnWait operation not started yet is handed to the group's worker
  // thread, so that polling makes progress.
  bool is_completed() const;
  // Completed without error.
  bool is_success() const;
  // The error, once completed with one; null otherwise.
  std::exception_ptr exception() const;
  const std::string& description() const;

  // Runs `callback` once the work completes (at once, on this thread, if it already has;
  // otherwise on the thread that completes it), before wait() returns to anyone. In a callback,
  // exception() tells the outcome. Callbacks must not throw or block for long.
  void then(std::function<void(Work&)> callback);

  // --- for backends and the process group ---
  // Completes the work (error: null for success). Later calls are ignored. Thread-safe.
  void finish(std::exception_ptr error = nullptr);
  // Says what a caller's wait(timeout) reports when it runs out (set by the process group).
  void set_timeout_explainer(std::function<std::string()> explain);
  // For an operation that starts when it is first waited for (Launch::OnWait): `start` is called
  // once, by the first wait() with here = true (it may run the operation on the calling thread),
  // or by wait(timeout) or is_completed() with here = false (hand it to the worker).
  void set_starter(std::function<void(bool here)> start);

  // An already completed Work (for a group of one and for no-ops).
  static std::shared_ptr<Work> completed(std::string description);

 private:
  mutable std::once_flag described_;
  mutable std::function<std::string()> describe_;  // run and released by the first description()
  mutable std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool finishing_ = false;  // finish() was called: the outcome is known, callbacks may be running
  bool done_ = false;       // callbacks have run: wait() returns
  std::exception_ptr error_;
  std::vector<std::function<void(Work&)>> callbacks_;
  std::function<std::string()> explain_timeout_;
  mutable std::function<void(bool)> start_;  // taken by the first call that starts the operation

  void start(bool here) const;
};

}  // namespace ddp
