#include "group/progress.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <thread>
#include <vector>

#include "ddp/store.h"
#include "util/strings.h"

namespace ddp::detail {

std::string encode(const ProgressRecord& r) {
  std::string hex;
  for (auto byte : r.last) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", byte);
    hex += two;
  }
  return cat(r.started, " ", r.finished, " ", hex);
}

std::optional<ProgressRecord> decode_progress(const std::string& text) {
  ProgressRecord r;
  auto first = text.find(' ');
  auto second = first == std::string::npos ? first : text.find(' ', first + 1);
  if (second == std::string::npos) return std::nullopt;
  auto started = parse_int(std::string_view(text).substr(0, first));
  auto finished = parse_int(std::string_view(text).substr(first + 1, second - first - 1));
  std::string_view hex = std::string_view(text).substr(second + 1);
  if (!started || !finished || hex.size() != r.last.size() * 2) return std::nullopt;
  for (std::size_t i = 0; i < r.last.size(); ++i) {
    unsigned value = 0;
    if (std::sscanf(std::string(hex.substr(2 * i, 2)).c_str(), "%2x", &value) != 1) return std::nullopt;
    r.last[i] = static_cast<std::uint8_t>(value);
  }
  r.started = static_cast<std::uint64_t>(*started);
  r.finished = static_cast<std::uint64_t>(*finished);
  return r;
}

std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }

// The process-wide publisher: wakes when a slot changes, writes every changed slot, then rests
// a little so that a burst of small operations costs one write per slot.
class ProgressReporter {
 public:
  static ProgressReporter& instance() {
    static auto* reporter = new ProgressReporter();  // never destroyed: slots may outlive statics
    return *reporter;
  }

  void add(ProgressSlot* slot) {
    std::lock_guard lock(mutex_);
    slots_.push_back(slot);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  // After this returns the reporter no longer touches `slot`.
  void remove(ProgressSlot* slot) {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return publishing_ != slot; });
    slots_.erase(std::remove(slots_.begin(), slots_.end(), slot), slots_.end());
  }

  // Holds the lock throughout, so that the thread's publications wait and none overtakes these.
  void publish_now() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return publishing_ == nullptr; });  // a record the thread is writing lands first
    for (ProgressSlot* slot : slots_) {
      if (auto record = slot->take_if_changed()) slot->publish(*record);
    }
  }

  void poke() {
    {
      std::lock_guard lock(mutex_);
      poked_ = true;
    }
    wake_.notify_one();
  }

 private:
  ProgressReporter() = default;

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return poked_; });
      poked_ = false;
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        ProgressSlot* slot = slots_[i];
        auto record = slot->take_if_changed();
        if (!record) continue;
        publishing_ = slot;
        lock.unlock();
        slot->publish(*record);
        lock.lock();
        publishing_ = nullptr;
        idle_.notify_all();
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<ProgressSlot*> slots_;
  ProgressSlot* publishing_ = nullptr;
  bool poked_ = false;
  std::thread thread_;
};

ProgressSlot::ProgressSlot(std::shared_ptr<Store> store, int rank)
    : store_(std::move(store)), key_(progress_key(rank)) {
  ProgressReporter::instance().add(this);
}

ProgressSlot::~ProgressSlot() { ProgressReporter::instance().remove(this); }

void ProgressSlot::started(const Op& op) {
  {
    std::lock_guard lock(mutex_);
    record_.started = op.seq + 1;
    record_.last = fingerprint(op);
    dirty_ = true;
  }
  ProgressReporter::instance().poke();
}

void ProgressSlot::finished(const Op& op) {
  {
    std::lock_guard lock(mutex_);
    record_.finished = op.seq + 1;
    dirty_ = true;
  }
  ProgressReporter::instance().poke();
}

void publish_progress_now() { ProgressReporter::instance().publish_now(); }

void ProgressSlot::publish(const ProgressRecord& record) {
  try {
    store_->set(key_, encode(record));
  } catch (...) {
    std::lock_guard lock(mutex_);
    failed_ = true;
  }
}

std::optional<ProgressRecord> ProgressSlot::take_if_changed() {
  std::lock_guard lock(mutex_);
  if (!dirty_ || failed_) return std::nullopt;
  dirty_ = false;
  return record_;
}

}  // namespace ddp::detail
