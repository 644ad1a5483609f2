#include "ddp/work.h"

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp {

Work::Work(std::string description) : description_(std::move(description)) {}

Work::Work(std::function<std::string()> describe) : describe_(std::move(describe)) {}

const std::string& Work::description() const {
  std::call_once(described_, [&] {
    if (describe_) description_ = describe_();
    describe_ = nullptr;
  });
  return description_;
}

void Work::start(bool here) const {
  std::function<void(bool)> start;
  {
    std::lock_guard lock(mutex_);
    start.swap(start_);
  }
  if (start) start(here);
}

void Work::wait() {
  start(true);
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void Work::wait(std::chrono::milliseconds timeout) {
  start(false);
  std::unique_lock lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) {
    auto explain = explain_timeout_;
    lock.unlock();
    std::string why = explain ? explain() : std::string();
    throw TimeoutError(detail::cat(description(), " did not finish within ", detail::format_duration(timeout),
                                   " of waiting", why.empty() ? "." : ". " + why));
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  start(false);
  std::lock_guard lock(mutex_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard lock(mutex_);
  return done_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard lock(mutex_);
  return error_;  // set before callbacks run, so a callback can read its outcome here
}

void Work::then(std::function<void(Work&)> callback) {
  {
    std::lock_guard lock(mutex_);
    if (!finishing_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(*this);
}

void Work::finish(std::exception_ptr error) {
  std::vector<std::function<void(Work&)>> callbacks;
  std::function<void(bool)> started;  // nothing left to start; released outside the lock
  {
    std::lock_guard lock(mutex_);
    if (finishing_) return;
    finishing_ = true;
    error_ = std::move(error);
    callbacks.swap(callbacks_);
    started.swap(start_);
  }
  // Callbacks run before waiters are released, so what they do (copy results out, say) is
  // visible to everyone who returns from wait().
  for (auto& callback : callbacks) callback(*this);
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_all();
}

void Work::set_timeout_explainer(std::function<std::string()> explain) {
  std::lock_guard lock(mutex_);
  explain_timeout_ = std::move(explain);
}

void Work::set_starter(std::function<void(bool here)> start) {
  std::lock_guard lock(mutex_);
  start_ = std::move(start);
}

std::shared_ptr<Work> Work::completed(std::string description) {
  auto work = std::make_shared<Work>(std::move(description));
  work->finish();
  return work;
}

}  // namespace ddp
