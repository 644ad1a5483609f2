// The collective suite: every op x dtype x size on a process group, checked against a reference
// computed locally from the same deterministic inputs every rank can generate. Shared by every
// backend's tests.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "ddp/process_group.h"

namespace ddp::test {

// Where the suite's buffers live when not in host memory (the nccl tests put them on a GPU).
// The suite fills and checks host arrays; it copies each one to the device before the op that
// uses it, and back before looking at the result.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Buffer allocate(std::size_t bytes, DataType dtype, std::size_t count) = 0;
  virtual void release(const Buffer& buffer) = 0;
  virtual void upload(const Buffer& device, const void* host) = 0;
  virtual void download(void* host, const Buffer& device) = 0;
};

// Host memory that the group's peers on this host read where it is
// (ProcessGroup::allocate_shared_memory); every allocation must succeed.
class SharedHostMemory final : public DeviceMemory {
 public:
  explicit SharedHostMemory(ProcessGroup& group) : group_(group) {}
  Buffer allocate(std::size_t bytes, DataType dtype, std::size_t count) override;
  void release(const Buffer& buffer) override;
  void upload(const Buffer& device, const void* host) override;
  void download(void* host, const Buffer& device) override;
  std::size_t allocated() const { return allocated_; }  // so far, in all

 private:
  ProcessGroup& group_;
  std::map<void*, std::shared_ptr<void>> live_;
  std::size_t allocated_ = 0;
};

struct SuiteOptions {
  std::vector<std::size_t> sizes = {0, 1, 13, 1009};  // elements per rank
  std::size_t large_bytes = 16u << 20;                // one run of every op at this size (float32); 0: skip
  DeviceMemory* memory = nullptr;                     // null: host memory
  bool bitwise = true;                                // also BAND, BOR, BXOR on integers
};

// Runs the suite on `group`; reports mismatches with gtest's EXPECT (on this rank).
void run_collective_suite(ProcessGroup& group, const SuiteOptions& options = {});

// 1,000 small all_reduces issued back to back without waiting, then checked.
void run_async_burst(ProcessGroup& group, int count = 1000);

}  // namespace ddp::test
