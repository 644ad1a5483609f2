// The sampler's once-per-process warnings, with a hook for tests.
#pragma once

#include <cstdint>

namespace ddp::detail {

// Logs (once per process, on stderr, unless DDP_LOG_LEVEL is error or off) that a second pass over
// `epoch` started without set_epoch.
void warn_epoch_not_advanced(std::int64_t epoch);

// Tests only: lets the next warn_epoch_not_advanced log again.
void reset_sampler_warnings_for_testing();

}  // namespace ddp::detail
