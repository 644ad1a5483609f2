// ddp::Store: the key-value store that processes rendezvous through (torch.distributed.Store).
// Keys are strings; values are byte strings (std::string may hold any bytes). Counters made by
// add() are stored as decimal text, so get() on them returns e.g. "3".
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

class Store {
 public:
  // The default timeout of blocking calls (get, wait), as in PyTorch.
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);

  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any earlier value, and wakes everyone waiting for it.
  virtual void set(const std::string& key, const std::string& value) = 0;

  // Returns the value of `key`, waiting up to `timeout` (default: timeout()) for it to be set.
  // Throws TimeoutError naming the key when it does not appear in time.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  std::string get(const std::string& key) { return get(key, timeout()); }

  // The values of `keys`, in their order, waiting up to `timeout` (default: timeout()) for every
  // one to be set: PyTorch's multi_get. Throws TimeoutError naming the keys still missing. A
  // TCPStore asks for them in one request (a rank that reads its N peers' records makes one round
  // trip, not N + 1); the other stores wait, then get each (below: the wait names every missing
  // key on a timeout, which a get per key would not).
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    if (keys.empty()) return {};
    wait(keys, timeout);
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (const auto& key : keys) values.push_back(get(key, timeout));
    return values;
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) { return multi_get(keys, timeout()); }

  // Atomically adds `delta` to the integer counter at `key` (created as 0) and returns the new
  // value. Throws InvalidArgument when the key holds something that is not an integer, or when
  // the sum does not fit in 64 bits.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // Atomically: if the key's current value equals `expected` (or the key is missing and
  // `expected` is empty), sets it to `desired`. Returns the value the key holds afterwards (for
  // a missing key whose expected value was not empty: `expected`, as PyTorch does).
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) = 0;

  // True when every key exists. Never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Waits until every key exists. Throws TimeoutError naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // Removes `key`; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;

  // How many keys the store holds (for a PrefixStore: the whole underlying store, as PyTorch).
  virtual std::int64_t num_keys() = 0;

  // A store on the same data with its own connection, for use by another thread while this one
  // blocks (a TCPStore opens a new connection; in-process stores return themselves).
  virtual std::shared_ptr<Store> clone() = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  // The timeout of blocking calls and of waiting for a reply. A PrefixStore passes it on to the
  // store under it.
  virtual void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

}  // namespace ddp
