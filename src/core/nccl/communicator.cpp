#include "nccl/communicator.h"

#include <cstring>
#include <thread>

#include "ddp/error.h"
#include "ddp/store.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/deadline.h"

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// How long a clean shutdown may wait for NCCL to flush before the communicator is aborted.
constexpr auto kFinalizeGrace = 5s;

// Sleeps a little longer each round: yields first (an op on NVLink completes in microseconds),
// then sleeps from 10 us up to 1 ms, so that a long wait costs little CPU. A sleep on `wakeup`
// ends when CUDA says the stream got there: without it, work that ends during a 1 ms sleep
// would be seen up to 1 ms late (DDP's last bucket, and the worker's next collective, with it).
class Backoff {
 public:
  void pause(Wakeup* wakeup = nullptr) {
    if (round_++ < 64) {
      std::this_thread::yield();
      return;
    }
    if (wakeup) {
      wakeup->sleep_for(sleep_);
    } else {
      std::this_thread::sleep_for(sleep_);
    }
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int round_ = 0;
  std::chrono::microseconds sleep_{10};
};

// Sets the current device for a cleanup path that must not throw.
class QuietDevice {
 public:
  explicit QuietDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~QuietDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

}  // namespace

Communicator::Communicator(Store& store, const std::string& key, int rank, int size, int device, Deadline deadline,
                           std::string name)
    : name_(std::move(name)), device_(device) {
  cuda::DeviceGuard guard(device);
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) cuda::throw_nccl(result, cat(name_, ": ncclGetUniqueId"), nullptr);
    store.set(key, std::string(id.internal, sizeof id.internal));
  } else {
    const auto left = ms_until(deadline);
    std::string value;
    try {
      value = store.get(key, left);
    } catch (const TimeoutError&) {
      throw TimeoutError(cat(name_, ": rank 0 did not publish its NCCL unique id within ", format_duration(left),
                             "; it may have failed to set up CUDA or NCCL (see its output)"));
    }
    if (value.size() != sizeof id.internal) {
      throw Error(cat(name_, ": the NCCL unique id in the store has ", value.size(), " bytes instead of ",
                      sizeof id.internal, "; do all ranks run the same build of ddp?"));
    }
    std::memcpy(id.internal, value.data(), sizeof id.internal);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; settle_locked() polls with the deadline
  std::lock_guard lock(mutex_);
  ncclResult_t result = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (result == ncclSuccess || result == ncclInProgress) result = comm_ ? settle_locked(deadline) : result;
  if (result == ncclSuccess) {
    log(LogLevel::Debug, name_, ": NCCL communicator ready (rank ", rank, " of ", size, " on cuda:", device, ")");
    return;
  }
  const std::string text = result == ncclInProgress ? std::string() : cuda::describe(result, comm_);
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
  if (result == ncclInProgress) {
    throw TimeoutError(cat(name_, ": the NCCL communicator (rank ", rank, " of ", size, " on cuda:", device,
                           ") was not set up within the timeout. A rank may have died, or NCCL cannot connect the "
                           "ranks: check NCCL_SOCKET_IFNAME and the firewall, and run with NCCL_DEBUG=INFO"));
  }
  throw Error(cat(
      name_, ": setting up the NCCL communicator (rank ", rank, " of ", size, " on cuda:", device, ") failed: ", text,
      result == ncclInvalidUsage ? ". If two ranks share a GPU: NCCL needs one GPU per rank (set LOCAL_RANK "
                                   "per process, or use gloo for several ranks on one GPU)"
                                 : ". Run with NCCL_DEBUG=INFO for NCCL's own account"));
}

Communicator::~Communicator() {
  std::lock_guard lock(mutex_);
  if (!comm_) return;
  QuietDevice device(device_);
  ncclResult_t result = ncclCommFinalize(comm_);
  if (result == ncclSuccess || result == ncclInProgress) result = settle_locked(Clock::now() + kFinalizeGrace);
  if (result == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    log(LogLevel::Warn, name_, ": NCCL did not shut down cleanly within ", format_duration(kFinalizeGrace),
        "; aborting the communicator");
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

ncclResult_t Communicator::settle_locked(Deadline deadline) {
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) return result;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    backoff.pause();
  }
}

void Communicator::enqueue(std::string_view what, const std::function<ncclResult_t(ncclComm_t)>& calls,
                           Deadline deadline) {
  std::lock_guard lock(mutex_);
  if (!comm_) throw_aborted(what);
  ncclResult_t result = calls(comm_);
  if (result == ncclInProgress) result = settle_locked(deadline);
  if (result == ncclSuccess) return;
  if (result == ncclInProgress) {
    abort_locked(cat("NCCL did not accept ", what, " within the timeout"));
    throw TimeoutError(cat(what, ": NCCL did not accept the operation within the timeout; the NCCL communicator '",
                           name_, "' was aborted"));
  }
  const std::string text = cuda::describe(result, comm_);
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) {
    // Rejected before anything started: the communicator is fine unless NCCL says otherwise.
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && (state == ncclSuccess || state == ncclInProgress)) {
      throw InvalidArgument(cat(what, ": NCCL rejected the call: ", text));
    }
  }
  abort_locked(text);
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) result = ncclInternalError;
  cuda::throw_async_nccl(result, what, text);
}

void Communicator::wait(cudaEvent_t event, std::string_view what, Deadline deadline, Wakeup* reached) {
  Backoff backoff;
  for (int round = 0;; ++round) {
    const cudaError_t query = cudaEventQuery(event);
    if (query == cudaSuccess) {
      check_async(what);  // the kernels of an aborted or failed communicator also end
      return;
    }
    if (query != cudaErrorNotReady) {
      cudaGetLastError();
      const std::string text = cuda::describe(query);
      abort(cat("CUDA failed while waiting for ", what, ": ", text));
      throw Error(cat(what, ": waiting for the device failed: ", text));
    }
    if (round % 8 == 0) check_async(what);
    if (Clock::now() >= deadline) {
      abort(cat(what, " timed out"));
      throw TimeoutError(cat(what,
                             ": NCCL had not finished it when the timeout ran out (its kernel was still waiting "
                             "for peers); the NCCL communicator '",
                             name_, "' was aborted so that the GPU is released"));
    }
    backoff.pause(reached);
  }
}

void Communicator::check_async(std::string_view what) {
  std::lock_guard lock(mutex_);
  if (!comm_) throw_aborted(what);
  ncclResult_t state = ncclSuccess;
  const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
  if (result != ncclSuccess) state = result;
  if (state == ncclSuccess || state == ncclInProgress) return;
  const std::string text = cuda::describe(state, comm_);
  abort_locked(text);
  cuda::throw_async_nccl(state, what, text);
}

void Communicator::abort(const std::string& reason) noexcept {
  std::lock_guard lock(mutex_);
  abort_locked(reason);
}

void Communicator::abort_locked(const std::string& reason) noexcept {
  if (!comm_) return;
  QuietDevice device(device_);
  ncclCommAbort(comm_);
  comm_ = nullptr;
  try {
    abort_reason_ = reason;
    log(LogLevel::Info, name_, ": NCCL communicator aborted: ", reason);
  } catch (...) {
  }
}

void Communicator::throw_aborted(std::string_view what) const {
  throw Error(cat(what, ": the NCCL communicator '", name_, "' was aborted after an earlier failure (", abort_reason_,
                  "), so this group cannot be used any more; make a new one (destroy_process_group, then "
                  "init_process_group)"));
}

}  // namespace ddp::detail
