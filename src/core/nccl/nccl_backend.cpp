// The "nccl" backend: NCCL's collectives on CUDA buffers (docs/NCCL.md).
//
// Every collective runs on the group's worker thread: the backend's communication stream waits
// for the buffers' `ready` events (where the caller's stream had got to when it issued the op),
// NCCL queues the operation on that stream, an event is recorded after it, and the communicator's
// watchdog polls that event (and NCCL's asynchronous errors) until it completes or the deadline
// passes. So a completed Work means the device work is done. Sends and receives go through
// P2PChannels, one per peer and direction, with their own communicators and streams.
#include "nccl/nccl_backend.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "ddp/error.h"
#include "ddp/store.h"
#include "nccl/communicator.h"
#include "nccl/cuda_api.h"
#include "nccl/p2p_channel.h"
#include "nccl/stream_wakeup.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string visible_devices() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value ? cat("CUDA_VISIBLE_DEVICES=", quote(value)) : std::string("CUDA_VISIBLE_DEVICES unset");
}

// This rank's GPU: LOCAL_RANK's (one process per GPU, as torchrun's lesson does), else the
// calling thread's current device.
int choose_device() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    cudaGetLastError();
    std::string why = error != cudaSuccess ? "CUDA reports " + cuda::describe(error) : "no CUDA device is visible";
    if (error == cudaErrorInsufficientDriver) {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      why += cat(": the NVIDIA driver is missing, or older than CUDA ", runtime / 1000, ".", runtime % 1000 / 10,
                 " (the runtime ddp was built with) needs; nvidia-smi shows the driver's CUDA version");
    }
    throw Error(cat("the nccl backend needs a CUDA device, but ", why, " (", visible_devices(),
                    "). On a machine without NVIDIA GPUs use the gloo backend, or init_process_group(\"\"), which "
                    "picks gloo when CUDA is not available."));
  }
  if (const char* local = std::getenv("LOCAL_RANK"); local && *local) {
    const auto index = parse_int(local);
    if (!index || *index < 0) throw InvalidArgument(cat("nccl: LOCAL_RANK is ", quote(local), ", not a number"));
    if (*index >= count) {
      throw InvalidArgument(cat("nccl: LOCAL_RANK is ", *index, " but this process sees ", count, " CUDA device",
                                count == 1 ? "" : "s", " (", visible_devices(),
                                "). NCCL needs one GPU per process: start at most ", count,
                                " processes per node (ddprun --nproc-per-node ", count,
                                "), or use the gloo backend, which can run several ranks on one GPU through host "
                                "memory."));
    }
    return static_cast<int>(*index);
  }
  int device = 0;
  cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

}  // namespace

void check_nccl_usable() { (void)choose_device(); }

namespace {

// A CPU buffer given to an NCCL op (only the DDP_DEBUG agreement check does that): a device
// copy for the op, copied back after it when the op writes it.
class Staged {
 public:
  Staged(Buffer& buffer, bool read, cudaStream_t stream, int device) : buffer_(buffer), host_(buffer) {
    if (buffer.device.is_cuda() || buffer.count == 0) return;
    cuda::check(cudaMalloc(&device_data_, buffer.bytes()), "cudaMalloc (staging a host buffer)");
    if (read) {
      cuda::check(cudaMemcpyAsync(device_data_, buffer.data, buffer.bytes(), cudaMemcpyHostToDevice, stream),
                  "cudaMemcpyAsync (staging a host buffer)");
    }
    buffer_.data = device_data_;
    buffer_.device = Device{Device::Type::CUDA, device};
    buffer_.ready = nullptr;
  }
  ~Staged() {
    if (device_data_) cudaFree(device_data_);
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  // After the op has completed.
  void copy_back() {
    if (device_data_) {
      cuda::check(cudaMemcpy(host_.data, device_data_, host_.bytes(), cudaMemcpyDeviceToHost),
                  "cudaMemcpy (a staged host buffer back)");
    }
  }

 private:
  Buffer& buffer_;
  Buffer host_;
  void* device_data_ = nullptr;
};

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(const BackendContext& ctx)
      : rank_(ctx.rank), size_(ctx.size), device_(choose_device()), timeout_(ctx.timeout), store_(ctx.store) {
    cuda::DeviceGuard guard(device_);
    stream_ = std::make_unique<cuda::Stream>();
    done_ = std::make_unique<cuda::Event>();
    mark_ = std::make_unique<cuda::Event>();
    comm_ = std::make_unique<Communicator>(*ctx.store, "nccl/comm", rank_, size_, device_, Clock::now() + ctx.timeout,
                                           cat("nccl rank ", rank_, " of ", size_));
    cuda::check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc (barrier scratch)");
  }

  ~NcclBackend() override {
    {
      std::lock_guard lock(channels_mutex_);
      channels_.clear();
    }
    comm_.reset();
    if (scratch_) cudaFree(scratch_);
  }

  std::string_view name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool accepts(const Device& device) const override { return device.is_cuda() && device.index == device_; }
  bool supports(DataType dtype, ReduceOp op) const override { return nccl_supports(dtype, op); }

  void all_reduce(Buffer data, ReduceOp op, Deadline deadline) override {
    const ncclRedOp_t nop = cuda::nccl_op(op);
    collective("nccl all_reduce", data, data, deadline, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(data.data, data.data, data.count, cuda::nccl_type(data.dtype), nop, c, s);
    });
  }

  void broadcast(Buffer data, int root, Deadline deadline) override {
    collective("nccl broadcast", data, data, deadline, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(data.data, data.data, data.count, cuda::nccl_type(data.dtype), root, c, s);
    });
  }

  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    // NCCL writes the result on the root only: the others' data stays as it was.
    const ncclRedOp_t nop = cuda::nccl_op(op);
    collective("nccl reduce", data, data, deadline, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduce(data.data, data.data, data.count, cuda::nccl_type(data.dtype), nop, root, c, s);
    });
  }

  void all_gather(Buffer input, Buffer output, Deadline deadline) override {
    collective("nccl all_gather", input, output, deadline, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(input.data, output.data, input.count, cuda::nccl_type(input.dtype), c, s);
    });
  }

  void reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) override {
    const ncclRedOp_t nop = cuda::nccl_op(op);
    collective("nccl reduce_scatter", input, output, deadline, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(input.data, output.data, output.count, cuda::nccl_type(input.dtype), nop, c, s);
    });
  }

  // gather, scatter and all_to_all: grouped sends and receives (every NCCL since 2.7 has them),
  // this rank's own chunk copied on the stream.
  void gather(Buffer input, Buffer output, int root, Deadline deadline) override {
    const std::size_t chunk = input.bytes();
    collective("nccl gather", input, output, deadline, [&](ncclComm_t c, cudaStream_t s) {
      const auto type = cuda::nccl_type(input.dtype);
      if (rank_ != root) return ncclSend(input.data, input.count, type, root, c, s);
      copy_on(s, at(output, rank_ * chunk), input.data, chunk);
      return grouped([&](int r) -> ncclResult_t {
        return r == rank_ ? ncclSuccess : ncclRecv(at(output, r * chunk), input.count, type, r, c, s);
      });
    });
  }

  void scatter(Buffer input, Buffer output, int root, Deadline deadline) override {
    const std::size_t chunk = output.bytes();
    collective("nccl scatter", input, output, deadline, [&](ncclComm_t c, cudaStream_t s) {
      const auto type = cuda::nccl_type(output.dtype);
      if (rank_ != root) return ncclRecv(output.data, output.count, type, root, c, s);
      copy_on(s, output.data, at(input, rank_ * chunk), chunk);
      return grouped([&](int r) -> ncclResult_t {
        return r == rank_ ? ncclSuccess : ncclSend(at(input, r * chunk), output.count, type, r, c, s);
      });
    });
  }

  void all_to_all(Buffer input, Buffer output, Deadline deadline) override {
    const std::size_t count = input.count / static_cast<std::size_t>(size_);
    const std::size_t chunk = count * element_size(input.dtype);
    collective("nccl all_to_all", input, output, deadline, [&](ncclComm_t c, cudaStream_t s) {
      const auto type = cuda::nccl_type(input.dtype);
      copy_on(s, at(output, rank_ * chunk), at(input, rank_ * chunk), chunk);
      return grouped([&](int r) -> ncclResult_t {
        if (r == rank_) return ncclSuccess;
        const ncclResult_t sent = ncclSend(at(input, r * chunk), count, type, r, c, s);
        return sent != ncclSuccess ? sent : ncclRecv(at(output, r * chunk), count, type, r, c, s);
      });
    });
  }

  void barrier(Deadline deadline) override {
    Buffer token{scratch_, 1, DataType::Float32, Device{Device::Type::CUDA, device_}};
    token.ready = done_->get();  // nothing to wait for but the last op on this stream
    collective("nccl barrier", token, token, deadline, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, c, s);
    });
  }

  Waiter post_send(Buffer data, int dst, std::uint32_t) override { return channel(rank_, dst).post(data); }
  Waiter post_recv(Buffer data, int src, std::uint32_t) override { return channel(src, rank_).post(data); }

  void abort() noexcept override {
    if (comm_) comm_->abort("the process group failed");
    std::lock_guard lock(channels_mutex_);
    for (auto& [key, channel] : channels_) channel->abort("the process group failed");
  }

 private:
  static void* at(const Buffer& b, std::size_t offset) { return static_cast<char*>(b.data) + offset; }

  static void copy_on(cudaStream_t stream, void* to, const void* from, std::size_t bytes) {
    if (to != from && bytes > 0) {
      cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync (own chunk)");
    }
  }

  // ncclGroupStart, calls(r) for every rank r, ncclGroupEnd; the first error wins (the group is
  // always closed).
  template <typename Calls>
  ncclResult_t grouped(Calls&& calls) {
    ncclResult_t first = ncclGroupStart();
    if (first != ncclSuccess) return first;
    for (int r = 0; r < size_ && first == ncclSuccess; ++r) first = calls(r);
    const ncclResult_t end = ncclGroupEnd();
    return first != ncclSuccess ? first : end;
  }

  // One collective: the stream waits for the buffers' producers, NCCL queues the op, the
  // watchdog waits for the event recorded after it.
  template <typename Calls>
  void collective(const char* what, Buffer& input, Buffer& output, Deadline deadline, Calls&& calls) {
    cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = stream_->get();
    const bool in_place = input.data == output.data;
    cuda::wait_until_ready(stream, {&input, &output}, *mark_, what);
    Staged staged_in(input, true, stream, device_);
    Staged staged_out(output, !in_place, stream, device_);
    if (in_place) output.data = input.data;
    comm_->enqueue(
        what, [&](ncclComm_t c) { return calls(c, stream); }, deadline);
    done_->record(stream, what);
    const auto reached = wakeup_when_reached(stream);
    comm_->wait(done_->get(), what, deadline, reached.get());
    (in_place ? staged_in : staged_out).copy_back();
  }

  P2PChannel& channel(int from, int to) {
    std::lock_guard lock(channels_mutex_);
    auto& channel = channels_[{from, to}];
    if (!channel) {
      channel = std::make_unique<P2PChannel>(store_->clone(), cat("nccl/p2p/", from, "->", to), from, to, rank_,
                                             device_, timeout_);
    }
    return *channel;
  }

  int rank_;
  int size_;
  int device_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<cuda::Stream> stream_;  // the communication stream of the collectives
  std::unique_ptr<cuda::Event> done_;     // recorded after each collective
  std::unique_ptr<cuda::Event> mark_;     // where the legacy default stream was, for buffers without `ready`
  void* scratch_ = nullptr;               // the barrier's token
  std::unique_ptr<Communicator> comm_;
  std::mutex channels_mutex_;
  std::map<std::pair<int, int>, std::unique_ptr<P2PChannel>> channels_;  // (from, to)
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(const BackendContext& context) {
  return std::make_unique<NcclBackend>(context);
}

bool cuda_available() {
  int count = 0;
  const bool available = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();  // a missing driver leaves an error behind
  return available;
}

}  // namespace ddp::detail
