// What every Store shares: multi_get for stores that have no request of their own for it.
#include "ddp/store.h"

namespace ddp {

std::vector<std::string> Store::multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return {};
  // The wait names every missing key on a timeout, which a get per key would not.
  wait(keys, timeout);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(get(key, timeout));
  return values;
}

}  // namespace ddp
