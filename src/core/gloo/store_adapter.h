// ddp's store as Gloo's rendezvous store (gloo::rendezvous::Store), for connecting Gloo's full mesh.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddp/store.h"

namespace ddp::detail {

// Gloo waits for each peer's key and then gets it; the wait here is a multi_get whose values the
// get then takes, so each peer's record costs one request instead of two.
class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(ddp::Store& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  ddp::Store& store_;
  std::unordered_map<std::string, std::string> fetched_;  // waited for, not yet taken by a get
};

}  // namespace ddp::detail
