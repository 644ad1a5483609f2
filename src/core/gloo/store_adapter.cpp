#include "gloo/store_adapter.h"

namespace ddp::detail {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(key, std::string(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  auto waited = fetched_.find(key);
  if (waited != fetched_.end()) {
    std::vector<char> value(waited->second.begin(), waited->second.end());
    fetched_.erase(waited);
    return value;
  }
  auto value = store_.get(key);
  return {value.begin(), value.end()};
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, store_.timeout()); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  auto values = store_.multi_get(keys, timeout);
  for (std::size_t i = 0; i < keys.size(); ++i) fetched_[keys[i]] = std::move(values[i]);
}

}  // namespace ddp::detail
