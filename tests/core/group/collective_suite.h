// The collective suite: every op x dtype x size on a process group, checked against a reference
// computed locally from the same deterministic inputs every rank can generate. Shared by every
// backend's tests.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ddp/process_group.h"

namespace ddp::test {

struct SuiteOptions {
  std::vector<std::size_t> sizes = {0, 1, 13, 1009};  // elements per rank
  std::size_t large_bytes = 16u << 20;                // one run of every op at this size (float32); 0: skip
};

// Runs the suite on `group`; reports mismatches with gtest's EXPECT (on this rank).
void run_collective_suite(ProcessGroup& group, const SuiteOptions& options = {});

// 1,000 small all_reduces issued back to back without waiting, then checked.
void run_async_burst(ProcessGroup& group, int count = 1000);

}  // namespace ddp::test
