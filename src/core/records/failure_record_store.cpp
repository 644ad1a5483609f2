// Where failure records are kept (ddp/detail/failure_record.h): apart from their text form, which the
// flight dump's fuzzer links without a store.
#include "ddp/detail/failure_record.h"

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
    unprefixed(store).compare_set(failure_record_key(record.rank), "", encode(record));
  } catch (...) {
  }
}

void clear_failure(Store& store, int global_rank) noexcept {
  try {
    unprefixed(store).delete_key(failure_record_key(global_rank));
  } catch (...) {
  }
}

std::optional<FailureRecord> read_failure(Store& store, int global_rank) noexcept {
  try {
    Store& root = unprefixed(store);
    const std::string key = failure_record_key(global_rank);
    if (!root.check({key})) return std::nullopt;
    return decode_failure_record(root.get(key));
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace ddp::detail
