#include "store/key_space.h"

#include <algorithm>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {

const std::string* KeySpace::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

bool KeySpace::contains_all(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
}

// Every change to a key comes through here, so that watchers hear of each change exactly once,
// with the value before it, and parked waits are answered whoever made the change.
template <typename Mutate>
KeySpace::Effects KeySpace::change(const std::string& key, Mutate&& mutate) {
  Effects effects;
  const auto watching = watchers_.find(key);  // mutate() touches data_ only: stays valid
  std::optional<std::string> before;          // copied only for watchers
  if (watching != watchers_.end()) {
    if (const std::string* value = find(key)) before = *value;
  }
  if (!mutate()) return effects;
  const std::string* now = find(key);
  if (watching != watchers_.end()) {
    Notice& notice = effects.notice.emplace();
    notice.change = !now ? Change::Deleted : before ? Change::Updated : Change::Created;
    notice.key = key;
    notice.old_value = before.value_or("");
    if (now) notice.new_value = *now;
    notice.watchers.assign(watching->second.begin(), watching->second.end());
  }
  if (!now) return effects;
  const auto waiting = waiters_.find(key);
  if (waiting == waiters_.end()) return effects;
  for (ClientId client : waiting->second) {
    const Parked& parked = parked_.at(client);
    if (contains_all(parked.keys)) effects.answers.push_back(answer(client, parked));
  }
  for (const Answer& a : effects.answers) unpark(a.client);  // after the loop: unpark edits waiters_
  return effects;
}

KeySpace::Effects KeySpace::set(const std::string& key, std::string value) {
  return change(key, [&] {
    data_[key] = std::move(value);
    return true;
  });
}

KeySpace::Changed<std::int64_t> KeySpace::add(const std::string& key, std::int64_t delta) {
  Changed<std::int64_t> result{0, {}};
  result.effects = change(key, [&] {
    result.value = apply_add(data_, key, delta);
    return true;
  });
  return result;
}

KeySpace::Changed<std::string> KeySpace::compare_set(const std::string& key, const std::string& expected,
                                                     const std::string& desired) {
  Changed<std::string> result;
  result.effects = change(key, [&] {
    bool changed = false;
    result.value = apply_compare_set(data_, key, expected, desired, changed);
    return changed;
  });
  return result;
}

KeySpace::Effects KeySpace::append(const std::string& key, const std::string& value, std::size_t max_value_bytes) {
  const std::string* old = find(key);
  const std::size_t size = (old ? old->size() : 0) + value.size();
  if (size > max_value_bytes) {
    throw InvalidArgument(
        cat("append to ", quote(key), " would make a value of ", size, " bytes, over the limit of ", max_value_bytes));
  }
  return change(key, [&] {
    data_[key] += value;
    return true;
  });
}

KeySpace::Changed<bool> KeySpace::erase(const std::string& key) {
  Changed<bool> result{false, {}};
  result.effects = change(key, [&] {
    result.value = data_.erase(key) > 0;
    return result.value;
  });
  return result;
}

std::optional<KeySpace::Answer> KeySpace::wait(ClientId client, Want want, std::vector<std::string> keys,
                                               Clock::time_point deadline) {
  unpark(client);  // only a misbehaving caller has one; the new wait replaces it
  Parked parked{want, std::move(keys), deadline};
  if (contains_all(parked.keys)) return answer(client, parked);
  // Parked on every key, present or not: a present key may be deleted before the others arrive.
  for (const auto& key : parked.keys) waiters_[key].insert(client);
  if (deadline != kNoDeadline) deadlines_.emplace(deadline, client);
  parked_.emplace(client, std::move(parked));
  return std::nullopt;
}

bool KeySpace::cancel_wait(ClientId client) {
  if (!is_parked(client)) return false;
  unpark(client);
  return true;
}

KeySpace::Clock::time_point KeySpace::next_deadline() const {
  return deadlines_.empty() ? kNoDeadline : deadlines_.begin()->first;
}

std::vector<KeySpace::Answer> KeySpace::expire(Clock::time_point now) {
  std::vector<Answer> expired;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const ClientId client = deadlines_.begin()->second;
    expired.push_back(answer(client, parked_.at(client)));
    unpark(client);
  }
  return expired;
}

void KeySpace::watch(ClientId client, const std::string& key) {
  watchers_[key].insert(client);
  watched_keys_[client].insert(key);
}

void KeySpace::drop(ClientId client) {
  unpark(client);
  auto watched = watched_keys_.find(client);
  if (watched == watched_keys_.end()) return;
  for (const auto& key : watched->second) {
    auto it = watchers_.find(key);
    it->second.erase(client);
    if (it->second.empty()) watchers_.erase(it);
  }
  watched_keys_.erase(watched);
}

KeySpace::Answer KeySpace::answer(ClientId client, const Parked& parked) const {
  Answer a;
  a.client = client;
  a.want = parked.want;
  for (const auto& key : parked.keys) {
    if (!data_.count(key)) a.missing.push_back(key);
  }
  if (!a.missing.empty()) return a;
  if (parked.want == Want::Value && !parked.keys.empty()) a.value = data_.at(parked.keys.front());
  if (parked.want == Want::Values) {
    a.values.reserve(parked.keys.size());
    for (const auto& key : parked.keys) a.values.push_back(data_.at(key));
  }
  return a;
}

void KeySpace::unpark(ClientId client) {
  auto it = parked_.find(client);
  if (it == parked_.end()) return;
  for (const auto& key : it->second.keys) {
    auto waiting = waiters_.find(key);
    if (waiting == waiters_.end()) continue;
    waiting->second.erase(client);
    if (waiting->second.empty()) waiters_.erase(waiting);
  }
  if (it->second.deadline != kNoDeadline) deadlines_.erase({it->second.deadline, client});
  parked_.erase(it);
}

}  // namespace ddp::detail
