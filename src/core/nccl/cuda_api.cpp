#include "nccl/cuda_api.h"

#include <vector>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail::cuda {

std::string describe(cudaError_t error) { return cat(cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"); }

void check(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error
  std::string hint;
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) {
    hint =
        ". Is the NVIDIA driver installed and new enough for this CUDA runtime (nvidia-smi), and does "
        "CUDA_VISIBLE_DEVICES list a GPU?";
  } else if (error == cudaErrorInvalidDevice) {
    hint = ". The device number is not one this process can see (CUDA_VISIBLE_DEVICES, nvidia-smi)";
  } else if (error == cudaErrorMemoryAllocation) {
    hint = ". The GPU is out of memory";
  }
  throw Error(cat(what, " failed: ", describe(error), hint));
}

std::string describe(ncclResult_t result, ncclComm_t comm) {
  std::string text = cat(ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += cat(": ", last);
  switch (result) {
    case ncclUnhandledCudaError: return cat("ncclUnhandledCudaError (", text, ")");
    case ncclSystemError: return cat("ncclSystemError (", text, ")");
    case ncclInternalError: return cat("ncclInternalError (", text, ")");
    case ncclInvalidArgument: return cat("ncclInvalidArgument (", text, ")");
    case ncclInvalidUsage: return cat("ncclInvalidUsage (", text, ")");
    case ncclRemoteError: return cat("ncclRemoteError (", text, ")");
    default: return text;
  }
}

void throw_nccl(ncclResult_t result, std::string_view what, ncclComm_t comm) {
  const std::string message = cat(what, " failed: ", describe(result, comm));
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: throw InvalidArgument(message);
    case ncclRemoteError: throw PeerLostError(message + ". A peer process exited or its connection broke");
    default: throw Error(message + ". Run with NCCL_DEBUG=INFO for NCCL's own account");
  }
}

void throw_async_nccl(ncclResult_t result, std::string_view what, std::string_view detail) {
  const std::string message = cat(what, " failed on the device: ", detail);
  if (result == ncclRemoteError) throw PeerLostError(message + ". A peer process exited or its connection broke");
  throw Error(message + ". Run with NCCL_DEBUG=INFO for NCCL's own account");
}

ncclDataType_t nccl_type(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    case DataType::Int8: return ncclInt8;
    case DataType::UInt8: return ncclUint8;
    case DataType::Int32: return ncclInt32;
    case DataType::Int64: return ncclInt64;
  }
  throw InvalidArgument("nccl: unknown data type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return ncclSum;
    case ReduceOp::AVG: return ncclAvg;
    case ReduceOp::PRODUCT: return ncclProd;
    case ReduceOp::MIN: return ncclMin;
    case ReduceOp::MAX: return ncclMax;
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR: break;
  }
  throw InvalidArgument(cat("NCCL has no ", to_string(op), " reduction; use gloo for bitwise reductions"));
}

DeviceGuard::DeviceGuard(int device) : device_(device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device_) check(cudaSetDevice(device_), cat("cudaSetDevice(", device_, ")"));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
}

Stream::Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}

Event::Event() { check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags"); }

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream, std::string_view what) {
  check(cudaEventRecord(event_, stream), cat(what, ": cudaEventRecord"));
}

void wait_until_ready(cudaStream_t stream, std::initializer_list<const Buffer*> buffers, Event& mark,
                      std::string_view what) {
  std::vector<void*> waited;
  for (const Buffer* b : buffers) {
    if (!b->ready || b->device.is_cpu()) continue;
    bool seen = false;
    for (void* e : waited) seen = seen || e == b->ready;
    if (seen) continue;
    check(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(b->ready), 0), cat(what, ": cudaStreamWaitEvent"));
    waited.push_back(b->ready);
  }
  if (!waited.empty()) return;
  mark.record(cudaStreamLegacy, what);
  check(cudaStreamWaitEvent(stream, mark.get(), 0), cat(what, ": cudaStreamWaitEvent"));
}

}  // namespace ddp::detail::cuda
