#include "util/worker.h"

#include <pthread.h>

namespace ddp::detail {

Worker::Worker(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

Worker::~Worker() { stop(); }

void Worker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t Worker::post(std::function<void()> task, bool wake) {
  std::uint64_t ticket;
  {
    std::lock_guard lock(mutex_);
    ticket = next_ticket_++;
    tasks_.push_back({ticket, std::move(task)});
  }
  if (wake) ready_.notify_one();
  return ticket;
}

void Worker::wake() { ready_.notify_one(); }

bool Worker::waiting() {
  std::lock_guard lock(mutex_);
  return waiting_;
}

bool Worker::run_here(std::uint64_t ticket) {
  std::unique_lock lock(mutex_);
  if (stopping_ || busy_ || tasks_.empty() || tasks_.front().ticket != ticket) return false;
  auto task = start_next();
  lock.unlock();
  struct Done {  // even if the task throws, which would leave the worker waiting for it forever
    Worker& w;
    ~Done() {
      std::unique_lock lock(w.mutex_);
      w.busy_ = false;
      const bool wake = w.stopping_ || !w.tasks_.empty();
      lock.unlock();
      if (wake) w.ready_.notify_one();  // the worker saw busy_ and went back to sleep
    }
  } done{*this};
  task();
  return true;
}

std::function<void()> Worker::start_next() {
  auto task = std::move(tasks_.front().run);
  tasks_.pop_front();
  busy_ = true;
  return task;
}

void Worker::run() {
  ::pthread_setname_np(::pthread_self(), name_.substr(0, 15).c_str());
  std::unique_lock lock(mutex_);
  for (;;) {
    waiting_ = true;
    ready_.wait(lock, [&] { return !busy_ && (stopping_ || !tasks_.empty()); });
    waiting_ = false;
    if (tasks_.empty()) return;  // stopping, and nothing left
    auto task = start_next();
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
  }
}

}  // namespace ddp::detail
