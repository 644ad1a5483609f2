#include "ddp/hash_store.h"

#include <algorithm>

#include "ddp/error.h"
#include "store/kv_semantics.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

std::string HashStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; })) {
    throw TimeoutError(cat("store get(", detail::quote(key), ") timed out after ", detail::format_duration(timeout),
                           ": no one set the key"));
  }
  return data_.at(key);
}

std::int64_t HashStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value;
  {
    std::lock_guard lock(mutex_);
    value = detail::apply_add(data_, key, delta);
  }
  changed_.notify_all();
  return value;
}

std::string HashStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  bool changed = false;
  std::string value;
  {
    std::lock_guard lock(mutex_);
    value = detail::apply_compare_set(data_, key, expected, desired, changed);
  }
  if (changed) changed_.notify_all();
  return value;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto present = [&] {
    return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
  };
  if (!changed_.wait_for(lock, timeout, present)) {
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (!data_.count(key)) missing.push_back(detail::quote(key));
    }
    throw TimeoutError(cat("store wait timed out after ", detail::format_duration(timeout),
                           "; still missing: ", detail::join(missing)));
  }
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard lock(mutex_);
  return data_.erase(key) > 0;
}

std::int64_t HashStore::num_keys() {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(data_.size());
}

std::shared_ptr<Store> HashStore::clone() { return shared_from_this(); }

}  // namespace ddp
