// Checked CUDA runtime and NCCL calls for the nccl backend: errors become ddp errors whose text
// names the call, the error and what it means; RAII for devices, streams and events; the
// mapping of ddp's types and operators to NCCL's. Only the CUDA build includes this.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <string_view>

#include "ddp/types.h"

namespace ddp::detail::cuda {

// "cudaErrorNoDevice (no CUDA-capable device is detected)".
std::string describe(cudaError_t error);
// Throws Error "<what> failed: <describe(error)>" unless error is cudaSuccess. Clears the
// runtime's last error first, so that a non-sticky error does not resurface later.
void check(cudaError_t error, std::string_view what);

// "ncclRemoteError (remote process exited or there was a network error): <NCCL's last error>".
std::string describe(ncclResult_t result, ncclComm_t comm = nullptr);
// Throws for an NCCL error found when calling `what`: InvalidArgument for rejected arguments
// (ncclInvalidArgument, ncclInvalidUsage), PeerLostError for ncclRemoteError, Error otherwise.
[[noreturn]] void throw_nccl(ncclResult_t result, std::string_view what, ncclComm_t comm);
// As throw_nccl for an error NCCL reported asynchronously (the device work failed): never
// InvalidArgument, since the communicator is unusable afterwards.
[[noreturn]] void throw_async_nccl(ncclResult_t result, std::string_view what, std::string_view detail);

ncclDataType_t nccl_type(DataType dtype);
// Throws InvalidArgument for the bitwise operators (nccl_supports() is false for them).
ncclRedOp_t nccl_op(ReduceOp op);

// Makes `device` current on this thread for its lifetime, then restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_;
};

// A non-blocking stream (it never waits implicitly for the legacy default stream) on the
// current device.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event without timing, on the current device.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream, std::string_view what);

 private:
  cudaEvent_t event_ = nullptr;
};

// Queues on `stream` a wait for each buffer's `ready` event; when none has one, a wait for the
// work queued so far on the legacy default stream (recorded in `mark`).
void wait_until_ready(cudaStream_t stream, std::initializer_list<const Buffer*> buffers, Event& mark,
                      std::string_view what);

}  // namespace ddp::detail::cuda
