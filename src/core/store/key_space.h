// The TCPStore server's key space: the keys and their values, the clients parked until keys
// exist, and PyTorch 1.13's key watchers. It knows nothing of sockets or protocols: a change
// returns what the server must do about it (answer these parked clients, tell these watchers),
// and the server's protocol handlers turn that into bytes. Both protocols share one key space,
// so a key set by either kind of client wakes the waiters and watchers of both.
//
// Clients are named by an id the server chooses (its socket's descriptor). Not thread-safe: the
// server's one thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/kv_semantics.h"

namespace ddp::detail {

class KeySpace {
 public:
  using ClientId = int;
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

  // What a parked client asked for: a get wants the value of its one key, a multi_get the
  // values of all its keys, a wait only that every key exists.
  enum class Want : std::uint8_t { Value, Values, Keys };

  // A wait that is over: whom to answer, and with what.
  struct Answer {
    ClientId client = -1;
    Want want = Want::Keys;
    std::string value;                 // Want::Value, when the key exists
    std::vector<std::string> values;   // Want::Values, when every key exists: in the keys' order
    std::vector<std::string> missing;  // empty: every key exists; else its deadline passed
  };

  // How a change looks to a watcher.
  enum class Change : std::uint8_t { Created, Updated, Deleted };

  // A change to a watched key, for its watchers (PyTorch 1.13's watch_key). (No default member
  // initializers: clang cannot use them in std::optional<Notice> inside this class.)
  struct Notice {
    Change change;
    std::string key;
    std::string old_value;  // empty for a created key
    std::string new_value;  // empty for a deleted key
    std::vector<ClientId> watchers;
  };

  // What one change to a key asks of the server, in this order: tell the watchers, then answer
  // the parked clients whose keys now all exist. Empty (no allocation) when nobody cares.
  struct Effects {
    std::optional<Notice> notice;
    std::vector<Answer> answers;
  };

  // A change's result together with its effects: `auto [value, effects] = keys.add(k, 1);`
  template <typename T>
  struct Changed {
    T value;
    Effects effects;
  };

  // ---- Reading (never changes anything).

  // The value at `key`, or null. Valid until the next change.
  const std::string* find(const std::string& key) const;
  bool contains_all(const std::vector<std::string>& keys) const;
  std::size_t size() const { return data_.size(); }

  // ---- Changing keys (store.h says what each means).

  Effects set(const std::string& key, std::string value);
  // Throws InvalidArgument (and changes nothing) when the key holds something other than an integer.
  Changed<std::int64_t> add(const std::string& key, std::int64_t delta);
  // PyTorch's compare_set; effects only when the key was written.
  Changed<std::string> compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  // Appends `value` to the key's value (a missing key: sets it). Throws InvalidArgument (and
  // changes nothing) when the result would be longer than `max_value_bytes`.
  Effects append(const std::string& key, const std::string& value, std::size_t max_value_bytes);
  // Whether the key existed; effects only when it did.
  Changed<bool> erase(const std::string& key);

  // ---- Waiting for keys.

  // The answer now when every key exists; otherwise parks `client` on the missing keys until
  // they all exist (a later change's Effects answer it) or `deadline` passes (expire answers
  // it). A client has one wait at most: a new one replaces its parked one.
  std::optional<Answer> wait(ClientId client, Want want, std::vector<std::string> keys,
                             Clock::time_point deadline = kNoDeadline);
  // Forgets the client's parked wait, if any (PyTorch's CANCEL_WAIT). Returns whether there was one.
  bool cancel_wait(ClientId client);
  bool is_parked(ClientId client) const { return parked_.count(client) > 0; }
  // The earliest deadline of a parked wait; kNoDeadline when none has one.
  Clock::time_point next_deadline() const;
  // Unparks every wait whose deadline is at or before `now` and returns their answers, each
  // naming the keys still missing.
  std::vector<Answer> expire(Clock::time_point now);

  // ---- Watching keys (PyTorch 1.13's watch_key).

  // From now on, every change of `key` lists `client` among its Notice's watchers.
  void watch(ClientId client, const std::string& key);

  // ---- Clients that go away.

  // Forgets the client's parked wait and its watches.
  void drop(ClientId client);

 private:
  struct Parked {
    Want want;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  // Runs `mutate` (which returns whether it wrote `key`) and collects the effects of the change.
  template <typename Mutate>
  Effects change(const std::string& key, Mutate&& mutate);
  // The answer for a wait whose keys all exist.
  Answer answer(ClientId client, const Parked& parked) const;
  void unpark(ClientId client);

  KeyValueMap data_;
  std::unordered_map<ClientId, Parked> parked_;
  std::unordered_map<std::string, std::set<ClientId>> waiters_;       // key -> parked on it
  std::set<std::pair<Clock::time_point, ClientId>> deadlines_;        // parked waits with a deadline
  std::unordered_map<std::string, std::set<ClientId>> watchers_;      // key -> watching it
  std::unordered_map<ClientId, std::set<std::string>> watched_keys_;  // client -> keys it watches
};

}  // namespace ddp::detail
