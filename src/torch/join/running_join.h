// The join running in this process, as code outside the joinables' hooks sees it: which ranks
// take part in a communication among the ranks still training (SyncBatchNorm's).
#pragma once

#include <optional>
#include <vector>

#include "ddp/process_group.h"

namespace ddp::detail {

// The group ranks of `group` that take part in this iteration's communication among the ranks
// still training: nullopt for all of them (no join running, a disabled one, or every rank still
// training). Throws Error inside a running join before its first announcement (the first
// joinable's forward has not run yet). Waits for the announcement.
std::optional<std::vector<int>> members_still_training(const ProcessGroup& group);

}  // namespace ddp::detail
