// ddp::FileStore: a Store kept in one file, for rendezvous through a file system that every
// process can see (init method file:///path). Each operation takes an exclusive flock on the
// file; blocking calls poll it. The last FileStore object to close removes the file. Thread-safe.
#pragma once

#include <map>
#include <mutex>

#include "ddp/store.h"

namespace ddp {

class FileStore : public Store {
 public:
  // Opens (creating if needed) the store at `path`. `num_users` is informational, as in PyTorch:
  // the file is removed when every FileStore that opened it has been destroyed.
  // Throws IOError naming the path when the file cannot be created or locked.
  explicit FileStore(std::string path, int num_users = -1);
  ~FileStore() override;

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

  const std::string& path() const { return path_; }

 private:
  class Locked;  // an open, flocked file with the log read up to its end
  std::string path_;
  std::mutex mutex_;
  std::map<std::string, std::string> cache_;  // the replayed log
  long long offset_ = 0;                      // how far the log has been replayed
};

}  // namespace ddp
