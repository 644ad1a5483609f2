// One direction of point-to-point traffic between this rank and one peer.
//
// Each direction has a 2-rank NCCL communicator and a stream of its own, so that a send and a
// receive between the same two ranks never queue behind each other (NCCL runs one
// communicator's kernels in order: a large send waiting for the peer's receive would otherwise
// block the receive the peer needs first), nor behind collectives. The communicator is set up
// on first use, by a thread of the channel, so that posting never blocks the caller; the same
// thread then queues the transfers in the order they were posted. Sends and receives between
// two ranks match in that order; tags are not used (as with PyTorch's NCCL backend).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "ddp/backend.h"
#include "util/worker.h"
#include "nccl/communicator.h"

namespace ddp::detail {

class P2PChannel {
 public:
  // The channel from rank `from` to rank `to` (one of them is this rank) of a group, on
  // `device`. Its communicator meets the peer's under `key` in `store` (a store of its own).
  P2PChannel(std::shared_ptr<Store> store, std::string key, int from, int to, int self, int device,
             std::chrono::milliseconds timeout);
  // Runs what was posted (each transfer bounded by the timeout), then shuts the communicator down.
  ~P2PChannel();
  P2PChannel(const P2PChannel&) = delete;
  P2PChannel& operator=(const P2PChannel&) = delete;

  // Starts sending (on the `from` rank) or receiving (on the `to` rank) `data`; returns at once.
  // The waiter returns when the transfer is done, and throws at its deadline or on an error,
  // after aborting the channel's communicator.
  Backend::Waiter post(const Buffer& data);

  void abort(const std::string& reason) noexcept;

 private:
  struct Transfer;
  void start(Transfer& transfer);
  std::string no_peer() const;

  std::shared_ptr<Store> store_;
  std::string key_;
  int from_, to_, self_, device_;
  std::chrono::milliseconds timeout_;
  std::string what_;  // "send to rank 2", "recv from rank 0"

  std::mutex mutex_;                    // guards comm_ and aborted_
  std::shared_ptr<Communicator> comm_;  // set up by the first transfer
  std::string aborted_;                 // why, when aborted before comm_ existed
  std::unique_ptr<cuda::Stream> stream_;
  std::unique_ptr<cuda::Event> mark_;
  std::unique_ptr<Worker> thread_;  // last: joined first
};

}  // namespace ddp::detail
