// Gloo's algorithms over its TCP transport, on CPU buffers (gloo_backend.h).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "ddp/error.h"
#include "gloo/device.h"
#include "gloo/doubling.h"
#include "gloo/gloo_backend.h"
#include "gloo/store_adapter.h"
#include "gloo/tuning.h"
#include "reduce/reduce.h"
#include "util/deadline.h"
#include "util/error_kind.h"
#include "util/log.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

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

// Runs a Gloo call that must end by `deadline`, turning its exceptions into ddp's by their type:
// Gloo's transport throws IoException both when a wait runs out (each is given the time left
// until `deadline`) and when a connection breaks, so the clock tells them apart; anything else
// (EnforceNotMet, InvalidOperationException) is an error of Gloo's own.
template <typename Fn>
void guarded(std::string_view what, Backend::Deadline deadline, Fn&& fn) {
  try {
    fn();
  } catch (const ddp::Error&) {
    throw;
  } catch (const gloo::IoException& e) {
    const bool expired = std::chrono::steady_clock::now() >= deadline;
    throw_error(expired ? ErrorKind::Timeout : ErrorKind::PeerLost, cat("gloo ", what, ": ", e.what()));
  } catch (const std::exception& e) {
    throw_error(ErrorKind::Other, cat("gloo ", what, ": ", e.what()));
  }
}

class GlooBackend final : public Backend {
 public:
  GlooBackend(const BackendContext& ctx, const GlooPlacement& placement, std::size_t doubling_bytes)
      : rank_(ctx.rank),
        size_(ctx.size),
        doubling_(recursive_doubling(ctx.rank, ctx.size)),
        doubling_bytes_(doubling_bytes),
        group_ranks_(placement.group_ranks),
        hosts_(placement.hosts) {
    VariableProblems ignored;  // text; the CPU backend reports the tuning's problems
    const auto ifname = read_variables(kGlooVariables, with_overrides(ctx.variables), ignored).socket_ifname;
    auto device = shared_device(ctx.master_addr, ifname, placement);
    auto context = std::make_shared<gloo::rendezvous::Context>(ctx.rank, ctx.size);
    context->setTimeout(ctx.timeout);
    GlooStore store(*ctx.store);
    const auto deadline = std::chrono::steady_clock::now() + ctx.timeout;
    guarded("connecting the full mesh", deadline, [&] { context->connectFullMesh(store, device); });
    context_ = std::move(context);
  }

  std::string_view name() const override { return "gloo"; }
  int hosts() const override { return hosts_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool accepts(const Device& device) const override { return device.is_cpu(); }

  bool supports(DataType dtype, ReduceOp op) const override {
    return dtype != DataType::Float16 && dtype != DataType::BFloat16 && op != ReduceOp::AVG;
  }

  void all_reduce(Buffer data, ReduceOp op, Deadline deadline) override {
    if (data.bytes() <= doubling_bytes_) return doubling_all_reduce(data, op, deadline);
    run<gloo::AllreduceOptions>(
        "all_reduce", data.dtype, deadline,
        [&](auto& opts, auto* t) {
      opts.setOutput(typed(data, t), data.count);
      opts.setReduceFunction(reduction(data.dtype, op));
        },
        [](auto& opts) { gloo::allreduce(opts); });
  }

  void broadcast(Buffer data, int root, Deadline deadline) override {
    run<gloo::BroadcastOptions>(
        "broadcast", data.dtype, deadline,
        [&](auto& opts, auto* t) {
      opts.setOutput(typed(data, t), data.count);
      opts.setRoot(root);
        },
        [](auto& opts) { gloo::broadcast(opts); });
  }

  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    // Gloo may use the output as scratch: give non-roots a copy so their data stays as it was.
    std::vector<char> scratch;
    Buffer out = data;
    if (rank_ != root) {
      scratch.assign(static_cast<char*>(data.data), static_cast<char*>(data.data) + data.bytes());
      out.data = scratch.data();
    }
    run<gloo::ReduceOptions>(
        "reduce", data.dtype, deadline,
        [&](auto& opts, auto* t) {
      opts.setInput(typed(out, t), out.count);
      opts.setOutput(typed(out, t), out.count);
      opts.setRoot(root);
      opts.setReduceFunction(reduction(data.dtype, op));
        },
        [](auto& opts) { gloo::reduce(opts); });
  }

  void all_gather(Buffer input, Buffer output, Deadline deadline) override {
    run<gloo::AllgatherOptions>(
        "all_gather", input.dtype, deadline,
        [&](auto& opts, auto* t) {
      if (input.data != static_cast<char*>(output.data) + rank_ * input.bytes())
        opts.setInput(typed(input, t), input.count);
      opts.setOutput(typed(output, t), output.count);
        },
        [](auto& opts) { gloo::allgather(opts); });
  }

  void gather(Buffer input, Buffer output, int root, Deadline deadline) override {
    run<gloo::GatherOptions>(
        "gather", input.dtype, deadline,
        [&](auto& opts, auto* t) {
      opts.setInput(typed(input, t), input.count);
      if (rank_ == root) opts.setOutput(typed(output, t), output.count);
      opts.setRoot(root);
        },
        [](auto& opts) { gloo::gather(opts); });
  }

  void scatter(Buffer input, Buffer output, int root, Deadline deadline) override {
    run<gloo::ScatterOptions>(
        "scatter", output.dtype, deadline,
        [&](auto& opts, auto* t) {
      using T = std::remove_pointer_t<decltype(t)>;
      if (rank_ == root) {
        std::vector<T*> chunks;
        for (int r = 0; r < size_; ++r) chunks.push_back(typed(input, t) + r * output.count);
        opts.setInputs(chunks, output.count);
      }
      opts.setOutput(typed(output, t), output.count);
      opts.setRoot(root);
        },
        [](auto& opts) { gloo::scatter(opts); });
  }

  // reduce_scatter: Gloo has no general one; Backend's default all-reduces a copy.

  void all_to_all(Buffer input, Buffer output, Deadline deadline) override {
    run<gloo::AlltoallOptions>(
        "all_to_all", input.dtype, deadline,
        [&](auto& opts, auto* t) {
      opts.setInput(typed(input, t), input.count);
      opts.setOutput(typed(output, t), output.count);
        },
        [](auto& opts) { gloo::alltoall(opts); });
  }

  void barrier(Deadline deadline) override {
    run<gloo::BarrierOptions>(
        "barrier", DataType::UInt8, deadline, [](auto&, auto*) {}, [](auto& opts) { gloo::barrier(opts); });
  }

  Waiter post_send(Buffer data, int dst, std::uint32_t tag) override {
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer = context_->createUnboundBuffer(data.data, data.bytes());
    guarded("send", Deadline::max(), [&] { buffer->send(dst, p2p_slot(tag)); });  // posting: no wait
    return [buffer](Deadline deadline) { guarded("send", deadline, [&] { buffer->waitSend(ms_until(deadline)); }); };
  }

  Waiter post_recv(Buffer data, int src, std::uint32_t tag) override {
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer = context_->createUnboundBuffer(data.data, data.bytes());
    guarded("recv", Deadline::max(), [&] { buffer->recv(src, p2p_slot(tag)); });
    return [buffer](Deadline deadline) { guarded("recv", deadline, [&] { buffer->waitRecv(ms_until(deadline)); }); };
  }

  void abort() noexcept override {
    // Dropping the context closes its connections (once pending point-to-point buffers let go):
    // peers blocked on this rank see the connection close instead of waiting for their timeout.
    context_.reset();
  }

 private:
  // The envelope of every Gloo collective: `Options` on this context, filled by
  // fill(opts, (T*)nullptr) for a C++ type T as wide as `dtype` (Gloo only needs the element
  // size), with the next tag and the time left until `deadline`; then run(opts), its exceptions
  // turned into ddp's.
  template <typename Options, typename Fill, typename Run>
  void run(const char* what, DataType dtype, Deadline deadline, Fill&& fill, Run&& run) {
    guarded(what, deadline, [&] {
      with_type(dtype, [&](auto t) {
        Options opts(context_);
        fill(opts, static_cast<decltype(t)*>(nullptr));
        opts.setTag(next_tag());
        opts.setTimeout(ms_until(deadline));
        run(opts);
      });
    });
  }

  // What a doubling step's message starts with: the call its sender is in. Ranks that called
  // all_reduces of different sizes or types are told so by it, before the data's size can matter:
  // a message larger than its receive is an assertion in Gloo's network thread, which ends the
  // process. Every message fits its receive: no rank on this path sends more than a header and
  // doubling_bytes_ (the group's value). One message per step (a header of its own would cost a
  // wake-up more: 1.8x at 4 KB), so the steps run on a copy of the buffer behind the header.
  struct Header {
    std::uint64_t count = 0;
    std::uint32_t dtype = 0, op = 0;
    bool operator==(const Header&) const = default;
  };
  static constexpr std::size_t kHeader = sizeof(Header);

  // recursive_doubling's steps (doubling.h) over unbound buffers: work_ (header, this rank's
  // values) and scratch_ (the partner's message).
  void doubling_all_reduce(Buffer data, ReduceOp op, Deadline deadline) {
    guarded("all_reduce", deadline, [&] {
      const auto context = context_;  // as Gloo's options hold it, should abort() drop ours
      const std::uint32_t tag = next_tag();
      const std::size_t bytes = data.bytes();
      const Header header{data.count, static_cast<std::uint32_t>(data.dtype), static_cast<std::uint32_t>(op)};
      if (work_.size() < kHeader + bytes) work_.resize(kHeader + bytes);
      if (scratch_.size() < kHeader + std::max(bytes, doubling_bytes_))
        scratch_.resize(kHeader + std::max(bytes, doubling_bytes_));
      std::memcpy(work_.data(), &header, kHeader);
      std::memcpy(work_.data() + kHeader, data.data, bytes);
      char* values = work_.data() + kHeader;
      const char* theirs_values = scratch_.data() + kHeader;
      auto mine = context->createUnboundBuffer(work_.data(), kHeader + bytes);
      auto theirs = context->createUnboundBuffer(scratch_.data(), scratch_.size());
      for (const DoublingStep& step : doubling_) {
        const std::uint64_t slot = (std::uint64_t{0xfd} << 56) | (std::uint64_t{tag} << 8) | step.round;
        const bool sends = step.kind == DoublingStep::Send || step.kind == DoublingStep::Exchange;
        const bool receives = step.kind != DoublingStep::Send;
        if (sends) mine->send(step.peer, slot);
        if (receives) {
          theirs->recv(step.peer, slot);
          theirs->waitRecv(ms_until(deadline));
          Header theirs_header;
          std::memcpy(&theirs_header, scratch_.data(), kHeader);
          if (!(theirs_header == header)) {
            // The partner posted its receive before it could read ours: let our header reach it
            // before this rank's failure closes the connection, so that it names the mismatch
            // itself instead of a lost peer.
            if (sends) {
              try {
                mine->waitSend(ms_until(deadline));
              } catch (const std::exception&) {  // the mismatch is the news
              }
            }
            throw MismatchError(mismatch(header, theirs_header, step.peer));
          }
        }
        // Sent before the reduction overwrites it (waitSend: the bytes are in the socket).
        if (sends) mine->waitSend(ms_until(deadline));
        if (step.kind == DoublingStep::Receive) std::memcpy(values, theirs_values, bytes);  // the result
        if (step.kind == DoublingStep::Fold || step.kind == DoublingStep::Exchange) {
          const void* left = step.mine_first ? values : theirs_values;
          const void* right = step.mine_first ? theirs_values : values;
          detail::reduce(values, left, right, data.count, data.dtype, op);
        }
      }
      std::memcpy(data.data, values, bytes);
    });
  }

  std::string mismatch(const Header& mine, const Header& theirs, int peer) const {
    const auto call = [](const Header& h) {
      return cat("all_reduce (", to_string(static_cast<DataType>(h.dtype)), " x ", h.count, ", ",
                 to_string(static_cast<ReduceOp>(h.op)), ")");
    };
    return cat("the ranks called different collectives: this rank (rank ", group_rank(rank_), ") called ", call(mine),
               " where rank ", group_rank(peer), " called ", call(theirs),
               ". Every rank must call the same collectives, with the same sizes and types, in the same order "
               "(DDP_DEBUG=1 names every rank's call and its sequence number; ddp::join for uneven inputs)");
  }

  // The group rank of this context's rank `r` (a lane's or the hosts' leaders' context is not the group's).
  int group_rank(int r) const { return group_ranks_.empty() ? r : group_ranks_.at(static_cast<std::size_t>(r)); }

  template <typename T>
  static T* typed(const Buffer& b, T*) {
    return static_cast<T*>(b.data);
  }

  static gloo::AllreduceOptions::Func reduction(DataType dtype, ReduceOp op) {
    return [dtype, op](void* out, const void* a, const void* b, std::size_t n) {
      detail::reduce(out, a, b, n, dtype, op);
    };
  }

  // Gloo matches messages by slot. Collectives run one at a time, so a counter keeps them apart;
  // point-to-point slots carry the caller's tag under a prefix no Gloo collective uses.
  std::uint32_t next_tag() { return tag_++; }
  static std::uint64_t p2p_slot(std::uint32_t tag) { return (std::uint64_t{0xfe} << 56) | tag; }

  int rank_;
  int size_;
  std::uint32_t tag_ = 0;
  std::shared_ptr<gloo::Context> context_;
  std::vector<DoublingStep> doubling_;  // this rank's steps of a small all_reduce
  std::size_t doubling_bytes_;          // all_reduces of at most this many bytes take them
  std::vector<char> work_;              // a step's message: header, this rank's values
  std::vector<char> scratch_;           // the partner's message in a step
  std::vector<int> group_ranks_;        // placement.group_ranks: names peers in errors
  int hosts_;                           // placement.hosts
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const BackendContext& context, const GlooPlacement& placement,
                                           std::size_t doubling_bytes) {
  return std::make_unique<GlooBackend>(context, placement, doubling_bytes);
}

}  // namespace ddp::detail
