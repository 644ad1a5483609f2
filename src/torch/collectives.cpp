// Tensor collectives: check the tensors, view them as Buffers, run the buffer-level collective,
// and keep the tensors alive until the Work completes. Lists go through one flat tensor.
//
// CUDA tensors (docs/NCCL.md): on a backend that takes device buffers (nccl) the op is ordered
// after the work queued on the current stream when it was issued (an event recorded there is the
// buffers' `ready`); on any other backend (gloo) they are staged through host memory: copied to
// the host at issue, and the results copied back after the op. Either way what follows the op
// (copies back, unflattening) runs on the stream that was current at issue.
#include "ddp/torch/collectives.h"

#include <ATen/ATen.h>

#include "cuda_stream.h"
#include "ddp/error.h"
#include "util/log.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;

namespace {

GroupPtr resolve(const GroupPtr& group) { return group ? group : get_default_group(); }

// Whether `like`'s CUDA memory goes through host copies: when the backend takes host buffers but
// not that device's (gloo). One that takes neither (nccl, another GPU's tensor) refuses it itself.
bool stages(const ProcessGroup& group, const at::Tensor& like) {
  if (!like.defined() || !like.is_cuda()) return false;
  const Device device{Device::Type::CUDA, static_cast<int>(like.get_device())};
  return !group.accepts(device) && group.accepts(Device{});
}

// The tensors of one op as the backend sees them, kept alive until the op completes.
class OpTensors {
 public:
  OpTensors(const ProcessGroup& group, const at::Tensor& like)
      : stream_(like.defined() ? like.device() : c10::Device(c10::kCPU)), staged_(stages(group, like)) {}

  // A tensor the op reads, one it writes, one it does both to.
  Buffer in(const at::Tensor& t, const char* what = "tensor") { return place(t, what, true, false); }
  Buffer out(const at::Tensor& t, const char* what = "tensor") { return place(t, what, false, true); }
  Buffer inout(const at::Tensor& t, const char* what = "tensor") { return place(t, what, true, true); }

  // `b`, ordered after what the current stream had queued up to now: call it as the op is issued.
  Buffer ready(Buffer b) {
    if (b.device.is_cuda()) b.ready = stream_.ready();
    return b;
  }

  // Keeps the tensors alive until `work` completes; then copies staged results back and runs
  // `after` (e.g. unflattening), on the stream that was current at issue.
  std::shared_ptr<Work> hold(std::shared_ptr<Work> work, std::function<void()> after = nullptr) {
    work->then(
        [keep = std::move(keep_), copies = std::move(copies_), stream = stream_, after = std::move(after)](Work& done) {
      if (done.exception()) return;
      try {
        stream.run([&] {
          for (const auto& [device, host] : copies) device.copy_(host);
          if (after) after();
        });
      } catch (const std::exception& e) {
        detail::log(detail::LogLevel::Error, done.description(),
                    ": copying the result into the output tensors failed: ", e.what());
      }
    });
    return work;
  }

 private:
  Buffer place(const at::Tensor& t, const char* what, bool read, bool written) {
    Buffer b = to_buffer(t, what);
    keep_.push_back(t);
    if (!b.device.is_cuda() || !staged_) return b;
    at::Tensor host = read ? t.to(at::kCPU) : at::empty(t.sizes(), t.options().device(at::kCPU));
    keep_.push_back(host);
    if (written) copies_.emplace_back(t, host);
    return to_buffer(host, what);
  }

  detail::StreamContext stream_;
  bool staged_;
  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;  // (the op's tensor, its host copy)
};

void check_list(const std::vector<at::Tensor>& list, const at::Tensor& like, std::size_t expected, const char* what) {
  if (list.size() != expected) {
    throw InvalidArgument(cat(what, " holds ", list.size(), " tensors but must hold ", expected, " (one per rank)"));
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    if (t.scalar_type() != like.scalar_type() || t.device() != like.device() || t.numel() != like.numel()) {
      throw InvalidArgument(cat(what, "[", i, "] is ", t.scalar_type(), " with ", t.numel(), " elements on ",
                                t.device(), ", but every tensor must be ", like.scalar_type(), " with ", like.numel(),
                                " elements on ", like.device()));
    }
    to_buffer(t, what);  // contiguity and dtype
  }
}

// The list's tensors side by side in one new tensor.
at::Tensor flatten(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  for (const auto& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies the chunks of `flat` back into the list's tensors.
void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& list) {
  int64_t offset = 0;
  for (auto& t : list) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

c10::Device collective_device(const GroupPtr& group) {
  if (resolve(group)->accepts(Device{})) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(get_local_rank()));
}

DataType to_data_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DataType::Float32;
    case at::kDouble: return DataType::Float64;
    case at::kHalf: return DataType::Float16;
    case at::kBFloat16: return DataType::BFloat16;
    case at::kChar: return DataType::Int8;
    case at::kByte: return DataType::UInt8;
    case at::kInt: return DataType::Int32;
    case at::kLong: return DataType::Int64;
    default:
      throw InvalidArgument(cat("tensors of dtype ", type, " cannot be communicated; use float32, float64, float16, ",
                                "bfloat16, int8, uint8, int32 or int64 (convert with .to(...))"));
  }
}

Buffer to_buffer(const at::Tensor& tensor, const char* what) {
  if (!tensor.defined()) throw InvalidArgument(cat(what, " is an undefined tensor"));
  if (!tensor.is_contiguous()) {
    throw InvalidArgument(cat(what, " is not contiguous (sizes ", tensor.sizes(), ", strides ", tensor.strides(),
                              "); pass tensor.contiguous() and copy the result back if you need it in place"));
  }
  Device device;
  if (tensor.is_cuda()) device = Device{Device::Type::CUDA, static_cast<int>(tensor.get_device())};
  else if (!tensor.is_cpu())
    throw InvalidArgument(cat(what, " is on ", tensor.device(), "; ddp handles CPU and CUDA tensors"));
  return Buffer{tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), to_data_type(tensor.scalar_type()),
                device};
}

std::shared_ptr<Work> all_reduce_async(at::Tensor& tensor, ReduceOp op, const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer b = ts.inout(tensor);
  return ts.hold(g->all_reduce(ts.ready(b), op, launch));
}

std::shared_ptr<Work> broadcast_async(at::Tensor& tensor, int src, const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer b = ts.inout(tensor);
  return ts.hold(g->broadcast(ts.ready(b), src, launch));
}

std::shared_ptr<Work> reduce_async(at::Tensor& tensor, int dst, ReduceOp op, const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer b = ts.inout(tensor);
  return ts.hold(g->reduce(ts.ready(b), dst, op, launch));
}

std::shared_ptr<Work> all_gather_async(std::vector<at::Tensor>& outputs, const at::Tensor& tensor,
                                       const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer in = ts.in(tensor);
  check_list(outputs, tensor, static_cast<std::size_t>(g->size()), "all_gather outputs");
  at::Tensor flat = at::empty({tensor.numel() * g->size()}, tensor.options());
  Buffer out = ts.out(flat);
  auto work = g->all_gather(ts.ready(in), ts.ready(out), launch);
  return ts.hold(work, [flat, outputs]() mutable { unflatten(flat, outputs); });
}

std::shared_ptr<Work> all_gather_into_tensor_async(at::Tensor& output, const at::Tensor& input, const GroupPtr& group,
                                                   Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, input);
  Buffer in = ts.in(input, "input");
  Buffer out = ts.out(output, "output");
  return ts.hold(g->all_gather(ts.ready(in), ts.ready(out), launch));
}

std::shared_ptr<Work> reduce_scatter_async(at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op,
                                           const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, output);
  Buffer out = ts.out(output, "output");
  check_list(inputs, output, static_cast<std::size_t>(g->size()), "reduce_scatter inputs");
  at::Tensor flat = flatten(inputs);
  Buffer in = ts.in(flat);
  return ts.hold(g->reduce_scatter(ts.ready(in), ts.ready(out), op, launch));
}

std::shared_ptr<Work> reduce_scatter_tensor_async(at::Tensor& output, const at::Tensor& input, ReduceOp op,
                                                  const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, input);
  Buffer in = ts.in(input, "input");
  Buffer out = ts.out(output, "output");
  return ts.hold(g->reduce_scatter(ts.ready(in), ts.ready(out), op, launch));
}

std::shared_ptr<Work> all_to_all_async(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                                       const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  const auto n = static_cast<std::size_t>(g->size());
  if (inputs.empty()) throw InvalidArgument(cat("all_to_all inputs is empty; it must hold ", n, " tensors"));
  check_list(inputs, inputs.front(), n, "all_to_all inputs");
  check_list(outputs, inputs.front(), n, "all_to_all outputs");
  OpTensors ts(*g, inputs.front());
  at::Tensor flat_in = flatten(inputs);
  at::Tensor flat_out = at::empty_like(flat_in);
  Buffer in = ts.in(flat_in);
  Buffer out = ts.out(flat_out);
  auto work = g->all_to_all(ts.ready(in), ts.ready(out), launch);
  return ts.hold(work, [flat_out, outputs]() mutable { unflatten(flat_out, outputs); });
}

std::shared_ptr<Work> all_to_all_single_async(at::Tensor& output, const at::Tensor& input, const GroupPtr& group,
                                              Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, input);
  Buffer in = ts.in(input, "input");
  Buffer out = ts.out(output, "output");
  return ts.hold(g->all_to_all(ts.ready(in), ts.ready(out), launch));
}

std::shared_ptr<Work> gather_async(const at::Tensor& tensor, std::vector<at::Tensor>& gather_list, int dst,
                                   const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer in = ts.in(tensor);
  if (g->rank() != dst) {
    if (!gather_list.empty()) {
      throw InvalidArgument(cat("gather: only the destination rank ", dst, " passes a gather_list; rank ", g->rank(),
                                " passed ", gather_list.size(), " tensors"));
    }
    return ts.hold(g->gather(ts.ready(in), Buffer{nullptr, 0, in.dtype, in.device}, dst, launch));
  }
  check_list(gather_list, tensor, static_cast<std::size_t>(g->size()), "gather_list");
  at::Tensor flat = at::empty({tensor.numel() * g->size()}, tensor.options());
  Buffer out = ts.out(flat);
  auto work = g->gather(ts.ready(in), ts.ready(out), dst, launch);
  return ts.hold(work, [flat, gather_list]() mutable { unflatten(flat, gather_list); });
}

std::shared_ptr<Work> scatter_async(at::Tensor& tensor, const std::vector<at::Tensor>& scatter_list, int src,
                                    const GroupPtr& group, Launch launch) {
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer out = ts.out(tensor);
  if (g->rank() != src) {
    if (!scatter_list.empty()) {
      throw InvalidArgument(cat("scatter: only the source rank ", src, " passes a scatter_list; rank ", g->rank(),
                                " passed ", scatter_list.size(), " tensors"));
    }
    return ts.hold(g->scatter(Buffer{nullptr, 0, out.dtype, out.device}, ts.ready(out), src, launch));
  }
  check_list(scatter_list, tensor, static_cast<std::size_t>(g->size()), "scatter_list");
  at::Tensor flat = flatten(scatter_list);
  Buffer in = ts.in(flat);
  return ts.hold(g->scatter(ts.ready(in), ts.ready(out), src, launch));
}

std::shared_ptr<Work> isend(const at::Tensor& tensor, int dst, const GroupPtr& group, int tag) {
  if (tag < 0) throw InvalidArgument(cat("send: tag ", tag, " is negative"));
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer b = ts.in(tensor);
  return ts.hold(g->send(ts.ready(b), dst, static_cast<std::uint32_t>(tag)));
}

std::shared_ptr<Work> irecv(at::Tensor& tensor, int src, const GroupPtr& group, int tag) {
  if (tag < 0) throw InvalidArgument(cat("recv: tag ", tag, " is negative"));
  auto g = resolve(group);
  OpTensors ts(*g, tensor);
  Buffer b = ts.out(tensor);
  return ts.hold(g->recv(ts.ready(b), src, static_cast<std::uint32_t>(tag)));
}

// The blocking forms: each waits at once, so its collective runs on this thread when nothing is
// queued before it (Launch::OnWait).
void all_reduce(at::Tensor& t, ReduceOp op, const GroupPtr& g) { all_reduce_async(t, op, g, Launch::OnWait)->wait(); }
void broadcast(at::Tensor& t, int src, const GroupPtr& g) { broadcast_async(t, src, g, Launch::OnWait)->wait(); }
void reduce(at::Tensor& t, int dst, ReduceOp op, const GroupPtr& g) {
  reduce_async(t, dst, op, g, Launch::OnWait)->wait();
}
void all_gather(std::vector<at::Tensor>& o, const at::Tensor& t, const GroupPtr& g) {
  all_gather_async(o, t, g, Launch::OnWait)->wait();
}
void all_gather_into_tensor(at::Tensor& o, const at::Tensor& i, const GroupPtr& g) {
  all_gather_into_tensor_async(o, i, g, Launch::OnWait)->wait();
}
void reduce_scatter(at::Tensor& o, const std::vector<at::Tensor>& i, ReduceOp op, const GroupPtr& g) {
  reduce_scatter_async(o, i, op, g, Launch::OnWait)->wait();
}
void reduce_scatter_tensor(at::Tensor& o, const at::Tensor& i, ReduceOp op, const GroupPtr& g) {
  reduce_scatter_tensor_async(o, i, op, g, Launch::OnWait)->wait();
}
void all_to_all(std::vector<at::Tensor>& o, const std::vector<at::Tensor>& i, const GroupPtr& g) {
  all_to_all_async(o, i, g, Launch::OnWait)->wait();
}
void all_to_all_single(at::Tensor& o, const at::Tensor& i, const GroupPtr& g) {
  all_to_all_single_async(o, i, g, Launch::OnWait)->wait();
}
void gather(const at::Tensor& t, std::vector<at::Tensor>& l, int dst, const GroupPtr& g) {
  gather_async(t, l, dst, g, Launch::OnWait)->wait();
}
void scatter(at::Tensor& t, const std::vector<at::Tensor>& l, int src, const GroupPtr& g) {
  scatter_async(t, l, src, g, Launch::OnWait)->wait();
}
void send(const at::Tensor& t, int dst, const GroupPtr& g, int tag) { isend(t, dst, g, tag)->wait(); }
void recv(at::Tensor& t, int src, const GroupPtr& g, int tag) { irecv(t, src, g, tag)->wait(); }

}  // namespace ddp
