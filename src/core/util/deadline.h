// The time left until a deadline, for waits that take a duration in milliseconds (Gloo's, NCCL's).
#pragma once

#include <algorithm>
#include <chrono>

namespace ddp::detail {

// Rounded up, and at least 1 ms: a wait given it ends at or after `deadline`, never a fraction of a
// millisecond before, so a caller that then asks the clock whether the deadline has passed hears yes
// and calls the failure a timeout (truncating it made a peer that stopped answering look lost).
inline std::chrono::milliseconds ms_until(
    std::chrono::steady_clock::time_point deadline,
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  return std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - now), std::chrono::milliseconds(1));
}

}  // namespace ddp::detail
