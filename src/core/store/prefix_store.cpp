#include "ddp/prefix_store.h"

#include "ddp/error.h"

namespace ddp {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  if (!store_) throw InvalidArgument("PrefixStore: the underlying store is null");
  timeout_ = store_->timeout();
}

std::string PrefixStore::join(const std::string& key) const { return prefix_ + "/" + key; }

std::vector<std::string> PrefixStore::join(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(join(key));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) { store_->set(join(key), value); }

std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return store_->get(join(key), timeout);
}

std::vector<std::string> PrefixStore::multi_get(const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout) {
  return store_->multi_get(join(keys), timeout);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) { return store_->add(join(key), delta); }

std::string PrefixStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return store_->compare_set(join(key), expected, desired);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return store_->check(join(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(join(keys), timeout);
}

bool PrefixStore::delete_key(const std::string& key) { return store_->delete_key(join(key)); }

std::int64_t PrefixStore::num_keys() { return store_->num_keys(); }

void PrefixStore::set_timeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  store_->set_timeout(timeout);
}

std::shared_ptr<Store> PrefixStore::clone() {
  auto copy = std::make_shared<PrefixStore>(prefix_, store_->clone());
  copy->set_timeout(timeout_);
  return copy;
}

}  // namespace ddp
