// Where failure records are kept (records/failure_record.h): apart from their text form, which the
// flight dump's fuzzer links without a store.
#include "records/failure_record.h"

#include "ddp/prefix_store.h"
#include "ddp/store.h"

namespace ddp::detail {

Store& unprefixed(Store& store) {
  Store* s = &store;
  while (auto* prefixed = dynamic_cast<PrefixStore*>(s)) s = prefixed->underlying().get();
  return *s;
}

void publish_failure(Store& store, const FailureRecord& record) noexcept {
  try {
    Store& root = unprefixed(store);
    const std::string key = failure_record_key(record.rank), desired = encode(record);
    std::string expected;                            // none there
    for (int attempt = 0; attempt < 3; ++attempt) {  // another thread of this process may write between
      const std::string there = root.compare_set(key, expected, desired);
      if (there == desired) return;
      if (record.state == FailureState::Provisional || decode_failure_record(there).state == FailureState::Final) {
        return;
      }
      expected = there;  // a provisional record: the final one takes its place
    }
  } catch (...) {  // unreachable store, or a malformed record there (left as it is, like any other)
  }
}

void clear_failure(Store& store, int global_rank) noexcept {
  try {
    unprefixed(store).delete_key(failure_record_key(global_rank));
  } catch (...) {
  }
}

std::optional<FailureRecord> read_failure(Store& store, int global_rank, bool provisional) noexcept {
  try {
    Store& root = unprefixed(store);
    const std::string key = failure_record_key(global_rank);
    if (!root.check({key})) return std::nullopt;
    auto record = decode_failure_record(root.get(key));
    if (record.state == FailureState::Provisional && !provisional) return std::nullopt;
    return record;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace ddp::detail
