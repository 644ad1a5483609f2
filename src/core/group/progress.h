// Per-rank progress records: each rank publishes, for each group, how many collectives it has
// started and finished and which one it started last. A process-wide reporter thread writes them
// to the group's store (coalesced, so a burst of small ops costs one write), so that when an
// operation stalls any survivor can read where every rank is, even a rank that is stopped.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "op/op.h"

namespace ddp {
class Store;
}

namespace ddp::detail {

struct ProgressRecord {
  std::uint64_t started = 0;   // collectives started (the last started has seq started - 1)
  std::uint64_t finished = 0;  // collectives finished
  Fingerprint last{};          // the last started collective
};

std::string encode(const ProgressRecord& record);
std::optional<ProgressRecord> decode_progress(const std::string& text);

// The store key of `rank`'s record inside a group's store.
std::string progress_key(int rank);

// Publishes every record that changed since its last publication from the calling thread, before
// returning: a process about to end says where it was before its peers learn that it died (the
// reporter thread may not get to run again). Bounded by the stores' timeouts. Thread-safe.
void publish_progress_now();

// One group's record on this rank, published by the reporter thread. Thread-safe.
class ProgressSlot {
 public:
  ProgressSlot(std::shared_ptr<Store> store, int rank);
  ~ProgressSlot();
  void started(const Op& op);
  void finished(const Op& op);

 private:
  friend class ProgressReporter;
  // Returns the record to publish if it changed since the last call.
  std::optional<ProgressRecord> take_if_changed();
  // Writes `record` to the store; a store that fails is not asked again.
  void publish(const ProgressRecord& record);

  std::shared_ptr<Store> store_;  // a clone: the reporter may block on it without blocking others
  std::string key_;
  std::mutex mutex_;
  ProgressRecord record_;
  bool dirty_ = false;
  bool failed_ = false;  // the store stopped answering: stop trying
};

}  // namespace ddp::detail
