// The "gloo" backend: Gloo's algorithms over its TCP transport, on CPU buffers.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "ddp/error.h"
#include "ddp/store.h"
#include "gloo/gloo_backend.h"
#include "net/socket.h"
#include "reduce/reduce.h"
#include "util/log.h"

namespace ddp::detail {
namespace {

// Gloo's rendezvous talks to our store through this.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(ddp::Store& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto value = store_.get(key);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  ddp::Store& store_;
};

std::chrono::milliseconds remaining(Backend::Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// Calls `fn` with a value of a C++ type as wide as `dtype` (Gloo only needs the element size).
template <typename Fn>
void with_type(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::Float32: return fn(float{});
    case DataType::Float64: return fn(double{});
    case DataType::Float16:
    case DataType::BFloat16: return fn(std::uint16_t{});
    case DataType::Int8: return fn(std::int8_t{});
    case DataType::UInt8: return fn(std::uint8_t{});
    case DataType::Int32: return fn(std::int32_t{});
    case DataType::Int64: return fn(std::int64_t{});
  }
}

// Runs a Gloo call, turning its exceptions into ddp's: a timeout, a lost peer, or a plain error.
template <typename Fn>
void guarded(std::string_view what, Fn&& fn) {
  try {
    fn();
  } catch (const ddp::Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string message = e.what();
    if (message.find("Timed out") != std::string::npos || message.find("timed out") != std::string::npos) {
      throw TimeoutError(cat("gloo ", what, ": ", message));
    }
    if (message.find("closed") != std::string::npos || message.find("reset by peer") != std::string::npos ||
        message.find("Broken pipe") != std::string::npos || message.find("Connection refused") != std::string::npos) {
      throw PeerLostError(cat("gloo ", what, ": ", message));
    }
    throw Error(cat("gloo ", what, ": ", message));
  }
}

// The network interface Gloo listens on: GLOO_SOCKET_IFNAME (as PyTorch) or DDP_SOCKET_IFNAME if
// set, else the address that routes to the master, else this host's name.
gloo::transport::tcp::attr device_attr(const std::string& master_addr) {
  gloo::transport::tcp::attr attr;
  for (const char* name : {"DDP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* iface = std::getenv(name);
    if (iface && *iface) {
      attr.iface = iface;
      return attr;
    }
  }
  if (!master_addr.empty()) {
    if (is_loopback_host(master_addr)) {
      attr.hostname = "127.0.0.1";
      return attr;
    }
    attr.hostname = local_address_toward(master_addr);
    if (!attr.hostname.empty()) return attr;
  }
  attr.hostname = local_hostname();
  return attr;
}

// One device (one I/O thread) per interface, shared by every group of the process.
std::shared_ptr<gloo::transport::Device> shared_device(const std::string& master_addr) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<gloo::transport::Device>> devices;
  auto attr = device_attr(master_addr);
  const std::string key = attr.iface.empty() ? "host:" + attr.hostname : "iface:" + attr.iface;
  std::lock_guard lock(mutex);
  auto& device = devices[key];
  if (!device) {
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw IOError(cat("gloo cannot open a socket on ", attr.iface.empty() ? "address " + attr.hostname : "interface " + attr.iface,
                        ": ", e.what(), ". Name the interface that reaches the other hosts with GLOO_SOCKET_IFNAME (see `ip addr`)."));
    }
  }
  return device;
}

class GlooBackend final : public Backend {
 public:
  explicit GlooBackend(const BackendContext& ctx) : rank_(ctx.rank), size_(ctx.size) {
    auto device = shared_device(ctx.master_addr);
    auto context = std::make_shared<gloo::rendezvous::Context>(ctx.rank, ctx.size);
    context->setTimeout(ctx.timeout);
    StoreAdapter store(*ctx.store);
    guarded("connecting the full mesh", [&] { context->connectFullMesh(store, device); });
    context_ = std::move(context);
  }

  std::string_view name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool accepts(const Device& device) const override { return device.is_cpu(); }

  bool supports(DataType dtype, ReduceOp op) const override {
    return dtype != DataType::Float16 && dtype != DataType::BFloat16 && op != ReduceOp::AVG;
  }

  void all_reduce(Buffer data, ReduceOp op, Deadline deadline) override {
    guarded("all_reduce", [&] {
      with_type(data.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(static_cast<T*>(data.data), data.count);
        opts.setReduceFunction(reduction(data.dtype, op));
        opts.setTag(next_tag());
        opts.setTimeout(remaining(deadline));
        gloo::allreduce(opts);
      });
    });
  }

  void broadcast(Buffer data, int root, Deadline deadline) override {
    guarded("broadcast", [&] {
      with_type(data.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::BroadcastOptions opts(context_);
        opts.setOutput(static_cast<T*>(data.data), data.count);
        opts.setRoot(root);
        opts.setTag(next_tag());
        opts.setTimeout(remaining(deadline));
        gloo::broadcast(opts);
      });
    });
  }

  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    // Gloo may use the output as scratch: give non-roots a copy so their data stays as it was.
    std::vector<char> scratch;
    void* out = data.data;
    if (rank_ != root) {
      scratch.assign(static_cast<char*>(data.data), static_cast<char*>(data.data) + data.bytes());
      out = scratch.data();
    }
    guarded("reduce", [&] {
      with_type(data.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::ReduceOptions opts(context_);
        opts.setInput(static_cast<T*>(out), data.count);
        opts.setOutput(static_cast<T*>(out), data.count);
        opts.setRoot(root);
        opts.setReduceFunction(reduction(data.dtype, op));
        opts.setTag(next_tag());
        opts.setTimeout(remaining(deadline));
        gloo::reduce(opts);
      });
    });
  }

  void all_gather(Buffer input, Buffer output, Deadline deadline) override {
    guarded("all_gather", [&] {
      with_type(input.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::AllgatherOptions opts(context_);
        if (input.data != static_cast<char*>(output.data) + rank_ * input.bytes()) {
          opts.setInput(static_cast<T*>(input.data), input.count);
        }
        opts.setOutput(static_cast<T*>(output.data), output.count);
        opts.setTag(next_tag());
        opts.setTimeout(remaining(deadline));
        gloo::allgather(opts);
      });
    });
  }

  void gather(Buffer input, Buffer output, int root, Deadline deadline) override {
    guarded("gather", [&] {
      with_type(input.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::GatherOptions opts(context_);
        opts.setInput(static_cast<T*>(input.data), input.count);
        if (rank_ == root) opts.setOutput(static_cast<T*>(output.data), output.count);
        opts.setRoot(root);
        opts.setTag(next_tag());
        opts.setTimeout(remaining(deadline));
        gloo::gather(opts);
      });
    });
  }

  void scatter(Buffer input, Buffer output, int root, Deadline deadline) override {
    guarded("scatter", [&] {
      with_type(output.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::ScatterOptions opts(context_);
        if (rank_ == root) {
          std::vector<T*> chunks;
          for (int r = 0; r < size_; ++r) chunks.push_back(static_cast<T*>(input.data) + r * output.count);
          opts.setInputs(chunks, output.count);
        }
        opts.setOutput(static_cast<T*>(output.data), output.count);
        opts.setRoot(root);
        opts.setTag(next_tag());
        opts.setTimeout(remaining(deadline));
        gloo::scatter(opts);
      });
    });
  }

  void reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) override {
    // Gloo has no general reduce-scatter: all-reduce a copy and keep this rank's chunk.
    std::vector<char> scratch(static_cast<char*>(input.data), static_cast<char*>(input.data) + input.bytes());
    Buffer whole = input;
    whole.data = scratch.data();
    all_reduce(whole, op, deadline);
    std::memcpy(output.data, scratch.data() + rank_ * output.bytes(), output.bytes());
  }

  void all_to_all(Buffer input, Buffer output, Deadline deadline) override {
    guarded("all_to_all", [&] {
      with_type(input.dtype, [&](auto t) {
        using T = decltype(t);
        gloo::AlltoallOptions opts(context_);
        opts.setInput(static_cast<T*>(input.data), input.count);
        opts.setOutput(static_cast<T*>(output.data), output.count);
        opts.setTag(next_tag());
        opts.setTimeout(remaining(deadline));
        gloo::alltoall(opts);
      });
    });
  }

  void barrier(Deadline deadline) override {
    guarded("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(remaining(deadline));
      gloo::barrier(opts);
    });
  }

  Waiter post_send(Buffer data, int dst, std::uint32_t tag) override {
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer = context_->createUnboundBuffer(data.data, data.bytes());
    guarded("send", [&] { buffer->send(dst, p2p_slot(tag)); });
    return [buffer](Deadline deadline) { guarded("send", [&] { buffer->waitSend(remaining(deadline)); }); };
  }

  Waiter post_recv(Buffer data, int src, std::uint32_t tag) override {
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer = context_->createUnboundBuffer(data.data, data.bytes());
    guarded("recv", [&] { buffer->recv(src, p2p_slot(tag)); });
    return [buffer](Deadline deadline) { guarded("recv", [&] { buffer->waitRecv(remaining(deadline)); }); };
  }

  void abort() noexcept override {
    // Dropping the context closes its connections (once pending point-to-point buffers let go):
    // peers blocked on this rank see the connection close instead of waiting for their timeout.
    context_.reset();
  }

 private:
  static gloo::AllreduceOptions::Func reduction(DataType dtype, ReduceOp op) {
    return [dtype, op](void* out, const void* a, const void* b, std::size_t n) { detail::reduce(out, a, b, n, dtype, op); };
  }

  // Gloo matches messages by slot. Collectives run one at a time, so a counter keeps them apart;
  // point-to-point slots carry the caller's tag under a prefix no Gloo collective uses.
  std::uint32_t next_tag() { return tag_++; }
  static std::uint64_t p2p_slot(std::uint32_t tag) { return (std::uint64_t{0xfe} << 56) | tag; }

  int rank_;
  int size_;
  std::uint32_t tag_ = 0;
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const BackendContext& context) {
  return std::make_unique<GlooBackend>(context);
}

}  // namespace ddp::detail
