// Where failure records are kept (group/failure_record.h): apart from their text form, which the
// flight dump's fuzzer links without a store.
#include "group/failure_record.h"

#include "ddp/prefix_store.h"
#include "ddp/store.h"

namespace ddp::detail {
namespace {

// The store under every PrefixStore: the records sit beside the lost-rank records, where ddprun
// finds them without knowing the job's prefixes.
Store& root_of(Store& store) {
  Store* s = &store;
  while (auto* prefixed = dynamic_cast<PrefixStore*>(s)) s = prefixed->underlying().get();
  return *s;
}

}  // namespace

void publish_failure(Store& store, const FailureRecord& record) noexcept {
  try {
    root_of(store).compare_set(failure_record_key(record.rank), "", encode(record));
  } catch (...) {
  }
}

void clear_failure(Store& store, int global_rank) noexcept {
  try {
    root_of(store).delete_key(failure_record_key(global_rank));
  } catch (...) {
  }
}

std::optional<FailureRecord> read_failure(Store& store, int global_rank) noexcept {
  try {
    Store& root = root_of(store);
    const std::string key = failure_record_key(global_rank);
    if (!root.check({key})) return std::nullopt;
    return decode_failure_record(root.get(key));
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace ddp::detail
