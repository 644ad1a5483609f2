#include "nccl/p2p_channel.h"

#include <condition_variable>

#include "ddp/error.h"
#include "ddp/store.h"
#include "nccl/stream_wakeup.h"
#include "util/strings.h"

namespace ddp::detail {

using Clock = std::chrono::steady_clock;

struct P2PChannel::Transfer {
  Buffer data;
  Communicator::Deadline deadline;
  std::mutex mutex;
  std::condition_variable changed;
  bool queued = false;  // on the device, `done` recorded after it
  std::exception_ptr error;
  std::shared_ptr<Communicator> comm;  // the communicator it was queued on
  std::unique_ptr<cuda::Event> done;
  std::shared_ptr<Wakeup> reached;  // notified by CUDA after `done` (may be null)
};

P2PChannel::P2PChannel(std::shared_ptr<Store> store, std::string key, int from, int to, int self, int device,
                       std::chrono::milliseconds timeout)
    : store_(std::move(store)),
      key_(std::move(key)),
      from_(from),
      to_(to),
      self_(self),
      device_(device),
      timeout_(timeout),
      what_(self == from ? cat("nccl send to rank ", to) : cat("nccl recv from rank ", from)),
      thread_(std::make_unique<Worker>(cat("ddp-nccl-", from, "-", to))) {}

P2PChannel::~P2PChannel() {
  thread_.reset();  // the transfers already posted run (each bounded by its deadline)
  std::lock_guard lock(mutex_);
  comm_.reset();
}

Backend::Waiter P2PChannel::post(const Buffer& data) {
  auto transfer = std::make_shared<Transfer>();
  transfer->data = data;
  transfer->deadline = Clock::now() + timeout_;
  thread_->post([this, transfer] {
    try {
      start(*transfer);
    } catch (...) {
      std::lock_guard lock(transfer->mutex);
      transfer->error = std::current_exception();
    }
    transfer->changed.notify_all();
  });
  return [this, transfer](Backend::Deadline deadline) {
    std::shared_ptr<Communicator> comm;
    {
      std::unique_lock lock(transfer->mutex);
      const bool settled =
          transfer->changed.wait_until(lock, deadline, [&] { return transfer->queued || transfer->error; });
      if (transfer->error) std::rethrow_exception(transfer->error);
      if (!settled) {
        lock.unlock();
        abort(cat(what_, " was not started within the timeout"));
        throw TimeoutError(cat(what_, ": ", no_peer()));
      }
      comm = transfer->comm;
    }
    comm->wait(transfer->done->get(), what_, deadline, transfer->reached.get());
  };
}

void P2PChannel::start(Transfer& transfer) {
  cuda::DeviceGuard guard(device_);
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard lock(mutex_);
    if (!aborted_.empty()) {
      throw Error(cat(what_, ": the channel was aborted after an earlier failure (", aborted_, ")"));
    }
    comm = comm_;
  }
  if (!comm) {
    // The first transfer sets the channel up; the peer's first transfer in this direction meets it.
    try {
      comm = std::make_shared<Communicator>(*store_, key_, self_ == from_ ? 0 : 1, 2, device_, transfer.deadline,
                                            cat("p2p ", from_, "->", to_));
    } catch (const TimeoutError& e) {
      throw TimeoutError(cat(what_, ": ", no_peer(), " (", e.what(), ")"));
    }
    stream_ = std::make_unique<cuda::Stream>();
    mark_ = std::make_unique<cuda::Event>();
    std::lock_guard lock(mutex_);
    if (!aborted_.empty()) {
      comm->abort(aborted_);
      throw Error(cat(what_, ": the channel was aborted after an earlier failure (", aborted_, ")"));
    }
    comm_ = comm;
  }
  transfer.done = std::make_unique<cuda::Event>();
  const Buffer& data = transfer.data;
  cuda::wait_until_ready(stream_->get(), {&data}, *mark_, what_);
  const cudaStream_t stream = stream_->get();
  const int peer = self_ == from_ ? 1 : 0;  // its rank in the 2-rank communicator
  comm->enqueue(
      what_,
      [&](ncclComm_t c) {
    return self_ == from_ ? ncclSend(data.data, data.count, cuda::nccl_type(data.dtype), peer, c, stream)
                          : ncclRecv(data.data, data.count, cuda::nccl_type(data.dtype), peer, c, stream);
      },
      transfer.deadline);
  transfer.done->record(stream, what_);
  transfer.reached = wakeup_when_reached(stream);
  std::lock_guard lock(transfer.mutex);
  transfer.comm = std::move(comm);
  transfer.queued = true;
}

std::string P2PChannel::no_peer() const {
  return cat("the peer did not set up its side of the channel within the timeout (",
             self_ == from_ ? "it has not posted a matching recv" : "it has not posted a matching send",
             ", or it is stuck or gone)");
}

void P2PChannel::abort(const std::string& reason) noexcept {
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard lock(mutex_);
    if (aborted_.empty()) aborted_ = reason.empty() ? "aborted" : reason;
    comm = comm_;
  }
  if (comm) comm->abort(reason);
}

}  // namespace ddp::detail
