// The TCPStore client: one blocking connection (connection.h), one request at a time, in ddp's
// protocol or in PyTorch's (TCPStoreOptions::protocol); and the helpers tcp_store.h declares.
#include "ddp/tcp_store.h"

#include <cstdlib>

#include "ddp/error.h"
#include "store/connection.h"
#include "store/store_variables.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;
using detail::Clock;

std::string default_job_id() { return detail::process_store_settings().job_id; }

std::string_view to_string(StoreProtocol protocol) { return protocol == StoreProtocol::Ddp ? "ddp" : "torch"; }

StoreProtocol agent_store_protocol(const std::optional<std::string>& value) {
  if (!value || value->empty() || *value == "torch") return StoreProtocol::Torch;
  if (*value == "ddp") return StoreProtocol::Ddp;
  throw InvalidArgument(cat("DDP_STORE_PROTOCOL=", detail::quote(*value),
                            " is not a store protocol. Use \"ddp\" (ddprun exports it: its store is a ddp "
                            "TCPStoreServer) or \"torch\"; unset means torch (torchrun hosts a PyTorch TCPStore)."));
}

namespace {

TCPStoreOptions with_defaults(TCPStoreOptions options) {
  if (options.job_id.empty()) options.job_id = default_job_id();
  return options;
}

void check_key(const std::string& key, std::size_t limit) {
  if (key.size() > limit) {
    throw InvalidArgument(cat("store key of ", key.size(), " bytes exceeds the limit of ", limit));
  }
}

void check_keys(const std::vector<std::string>& keys, std::size_t limit) {
  for (const auto& key : keys) check_key(key, limit);
}

void check_value(const std::string& key, const std::string& value, std::size_t key_limit) {
  check_key(key, key_limit);
  if (value.size() > kMaxStoreValueBytes) {
    throw InvalidArgument(cat("store value for ", detail::quote(key), " is ", value.size(), " bytes; the limit is ",
                              kMaxStoreValueBytes, " (64 MiB)"));
  }
}

}  // namespace

TCPStore::TCPStore(TCPStoreOptions options) : TCPStore(with_defaults(std::move(options)), nullptr) {}

TCPStore::TCPStore(TCPStoreOptions options, std::shared_ptr<TCPStoreServer> server)
    : options_(std::move(options)), server_(std::move(server)) {
  timeout_ = options_.timeout;
  if (options_.is_server && !server_) {
    server_ = std::make_shared<TCPStoreServer>(options_.port, options_.job_id, options_.generation);
    options_.port = server_->port();
  }
  if (options_.protocol == StoreProtocol::Torch) {
    connection_ = detail::connect_torch(options_);
  } else {
    connection_ = detail::connect_ddp(options_);
  }
}

TCPStore::~TCPStore() = default;

std::shared_ptr<Store> TCPStore::clone() {
  auto copy = std::shared_ptr<TCPStore>(new TCPStore(options_, server_));
  copy->set_timeout(timeout_);
  return copy;
}

void TCPStore::set(const std::string& key, const std::string& value) {
  check_value(key, value, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  connection_->set(key, value, Clock::now() + timeout_);
}

std::string TCPStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->get(key, timeout);
}

std::vector<std::string> TCPStore::multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty() || !connection_->has_multi_get()) return Store::multi_get(keys, timeout);
  check_keys(keys, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->multi_get(keys, timeout);
}

std::int64_t TCPStore::add(const std::string& key, std::int64_t delta) {
  check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->add(key, delta, Clock::now() + timeout_);
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  check_value(key, expected, connection_->max_key_bytes());
  check_value(key, desired, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->compare_set(key, expected, desired, Clock::now() + timeout_);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  check_keys(keys, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->check(keys, Clock::now() + timeout_);
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  check_keys(keys, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  connection_->wait(keys, timeout);
}

bool TCPStore::delete_key(const std::string& key) {
  check_key(key, connection_->max_key_bytes());
  std::lock_guard lock(mutex_);
  return connection_->delete_key(key, Clock::now() + timeout_);
}

std::int64_t TCPStore::num_keys() {
  std::lock_guard lock(mutex_);
  return connection_->num_keys(Clock::now() + timeout_);
}

}  // namespace ddp
