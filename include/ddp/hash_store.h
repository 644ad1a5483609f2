// ddp::HashStore: an in-process Store, for groups whose ranks are threads of one process and for
// tests. Thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "ddp/store.h"

namespace ddp {

class HashStore : public Store, public std::enable_shared_from_this<HashStore> {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;
  std::shared_ptr<Store> clone() override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
};

}  // namespace ddp
