// One NCCL communicator and its watchdog.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0), so no NCCL call can outlast a
// deadline: a call that returns ncclInProgress is polled (ncclCommGetAsyncError) until NCCL has
// taken it. The watchdog is wait(): it polls a CUDA event recorded after the device work, and
// the communicator's asynchronous error, sleeping a little longer each round (up to 1 ms; a
// sleep ends early when CUDA's host function says the stream has passed the work), until the
// event completes, NCCL reports an error, or the deadline passes. On an error or at
// the deadline it aborts the communicator (ncclCommAbort: kernels waiting for a peer return, so
// the GPU is not left spinning) and throws; the thread that waited (the group's worker, or the
// p2p waiter) hands the error to the caller's Work, and the process group adds the operation's
// name, its sequence number and what the peers were doing.
//
// Thread-safe: NCCL calls on the communicator are serialized by a mutex that is never held
// while waiting for the device.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "nccl/cuda_api.h"
#include "util/wakeup.h"

namespace ddp {
class Store;
}

namespace ddp::detail {

class Communicator {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Joins communicator `key` of `size` ranks as `rank` on `device` (made current here): rank 0
  // puts a fresh ncclUniqueId under `key` in `store`, the others read it from there. `name`
  // says in errors which communicator this is. Throws TimeoutError when the ranks do not all
  // join by `deadline`, and NCCL's setup errors with advice.
  Communicator(Store& store, const std::string& key, int rank, int size, int device, Deadline deadline,
               std::string name);
  // Finalizes (flushing what NCCL still sends) for a few seconds at most, then destroys; aborts
  // instead when that fails. Never throws.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Runs `calls` (NCCL calls on the communicator, on the current device) and waits until NCCL has
  // taken them. Throws InvalidArgument when NCCL rejects the arguments (nothing was started),
  // other ddp errors otherwise (the communicator is then aborted).
  void enqueue(std::string_view what, const std::function<ncclResult_t(ncclComm_t)>& calls, Deadline deadline);

  // The watchdog: returns when `event` has completed without an NCCL error; throws TimeoutError
  // at the deadline and PeerLostError/Error for NCCL's asynchronous errors, aborting first.
  // `reached` (wakeup_when_reached, queued after the event; may be null) cuts its sleeps short.
  void wait(cudaEvent_t event, std::string_view what, Deadline deadline, Wakeup* reached = nullptr);

  // Aborts the communicator (idempotent); later calls throw an error quoting `reason`.
  void abort(const std::string& reason) noexcept;

  const std::string& name() const { return name_; }

 private:
  // Polls until NCCL's state is no longer ncclInProgress; returns that state. Holds mutex_.
  ncclResult_t settle_locked(Deadline deadline);
  void check_async(std::string_view what);
  void abort_locked(const std::string& reason) noexcept;
  [[noreturn]] void throw_aborted(std::string_view what) const;

  std::string name_;
  int device_;
  mutable std::mutex mutex_;
  ncclComm_t comm_ = nullptr;
  std::string abort_reason_;  // why comm_ was aborted
};

}  // namespace ddp::detail
