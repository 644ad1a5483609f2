// ddp::PrefixStore: a view of another store in which every key is prefixed with "<prefix>/", so
// that groups and subsystems sharing one store do not collide. Thread-safety is the underlying
// store's.
#pragma once

#include "ddp/store.h"

namespace ddp {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  using Store::get;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::multi_get;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  // The underlying store's count: keys outside the prefix included (as PyTorch).
  std::int64_t num_keys() override;
  std::shared_ptr<Store> clone() override;
  void set_timeout(std::chrono::milliseconds timeout) override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying() const { return store_; }

 private:
  std::string join(const std::string& key) const;
  std::vector<std::string> join(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace ddp
