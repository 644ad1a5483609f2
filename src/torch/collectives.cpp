// Tensor collectives: check the tensors, view them as Buffers, run the buffer-level collective,
// and keep the tensors alive until the Work completes. Lists go through one flat tensor.
#include "ddp/torch/collectives.h"

#include <ATen/ATen.h>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;

namespace {

GroupPtr resolve(const GroupPtr& group) { return group ? group : get_default_group(); }

// Keeps `keep` alive until `work` completes, then runs `after` (e.g. copying a flat result out).
std::shared_ptr<Work> hold(std::shared_ptr<Work> work, std::vector<at::Tensor> keep,
                           std::function<void()> after = nullptr) {
  work->then([keep = std::move(keep), after = std::move(after)](Work& done) {
    if (after && !done.exception()) after();
  });
  return work;
}

void check_list(const std::vector<at::Tensor>& list, const at::Tensor& like, std::size_t expected, const char* what) {
  if (list.size() != expected) {
    throw InvalidArgument(cat(what, " holds ", list.size(), " tensors but must hold ", expected, " (one per rank)"));
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    if (t.scalar_type() != like.scalar_type() || t.device() != like.device() || t.numel() != like.numel()) {
      throw InvalidArgument(cat(what, "[", i, "] is ", t.scalar_type(), " with ", t.numel(), " elements on ", t.device(),
                                ", but every tensor must be ", like.scalar_type(), " with ", like.numel(),
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
  if (tensor.is_cuda()) device = Device{Device::Type::CUDA, tensor.get_device()};
  else if (!tensor.is_cpu()) throw InvalidArgument(cat(what, " is on ", tensor.device(), "; ddp handles CPU and CUDA tensors"));
  return Buffer{tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), to_data_type(tensor.scalar_type()), device};
}

std::shared_ptr<Work> all_reduce_async(at::Tensor& tensor, ReduceOp op, const GroupPtr& group) {
  return hold(resolve(group)->all_reduce(to_buffer(tensor), op), {tensor});
}

std::shared_ptr<Work> broadcast_async(at::Tensor& tensor, int src, const GroupPtr& group) {
  return hold(resolve(group)->broadcast(to_buffer(tensor), src), {tensor});
}

std::shared_ptr<Work> reduce_async(at::Tensor& tensor, int dst, ReduceOp op, const GroupPtr& group) {
  return hold(resolve(group)->reduce(to_buffer(tensor), dst, op), {tensor});
}

std::shared_ptr<Work> all_gather_async(std::vector<at::Tensor>& outputs, const at::Tensor& tensor, const GroupPtr& group) {
  auto g = resolve(group);
  auto in = to_buffer(tensor);
  check_list(outputs, tensor, static_cast<std::size_t>(g->size()), "all_gather outputs");
  at::Tensor flat = at::empty({tensor.numel() * g->size()}, tensor.options());
  auto work = g->all_gather(in, to_buffer(flat));
  return hold(work, {tensor, flat}, [flat, outputs]() mutable { unflatten(flat, outputs); });
}

std::shared_ptr<Work> all_gather_into_tensor_async(at::Tensor& output, const at::Tensor& input, const GroupPtr& group) {
  auto g = resolve(group);
  return hold(g->all_gather(to_buffer(input, "input"), to_buffer(output, "output")), {output, input});
}

std::shared_ptr<Work> reduce_scatter_async(at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op,
                                           const GroupPtr& group) {
  auto g = resolve(group);
  auto out = to_buffer(output, "output");
  check_list(inputs, output, static_cast<std::size_t>(g->size()), "reduce_scatter inputs");
  at::Tensor flat = flatten(inputs);
  return hold(g->reduce_scatter(to_buffer(flat), out, op), {output, flat});
}

std::shared_ptr<Work> reduce_scatter_tensor_async(at::Tensor& output, const at::Tensor& input, ReduceOp op,
                                                  const GroupPtr& group) {
  auto g = resolve(group);
  return hold(g->reduce_scatter(to_buffer(input, "input"), to_buffer(output, "output"), op), {output, input});
}

std::shared_ptr<Work> all_to_all_async(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                                       const GroupPtr& group) {
  auto g = resolve(group);
  const auto n = static_cast<std::size_t>(g->size());
  if (inputs.empty()) throw InvalidArgument(cat("all_to_all inputs is empty; it must hold ", n, " tensors"));
  check_list(inputs, inputs.front(), n, "all_to_all inputs");
  check_list(outputs, inputs.front(), n, "all_to_all outputs");
  at::Tensor in = flatten(inputs);
  at::Tensor out = at::empty_like(in);
  auto work = g->all_to_all(to_buffer(in), to_buffer(out));
  return hold(work, {in, out}, [out, outputs]() mutable { unflatten(out, outputs); });
}

std::shared_ptr<Work> all_to_all_single_async(at::Tensor& output, const at::Tensor& input, const GroupPtr& group) {
  auto g = resolve(group);
  return hold(g->all_to_all(to_buffer(input, "input"), to_buffer(output, "output")), {output, input});
}

std::shared_ptr<Work> gather_async(const at::Tensor& tensor, std::vector<at::Tensor>& gather_list, int dst,
                                   const GroupPtr& group) {
  auto g = resolve(group);
  auto in = to_buffer(tensor);
  if (g->rank() != dst) {
    if (!gather_list.empty()) {
      throw InvalidArgument(cat("gather: only the destination rank ", dst, " passes a gather_list; rank ", g->rank(),
                                " passed ", gather_list.size(), " tensors"));
    }
    return hold(g->gather(in, Buffer{nullptr, 0, in.dtype, in.device}, dst), {tensor});
  }
  check_list(gather_list, tensor, static_cast<std::size_t>(g->size()), "gather_list");
  at::Tensor flat = at::empty({tensor.numel() * g->size()}, tensor.options());
  auto work = g->gather(in, to_buffer(flat), dst);
  return hold(work, {tensor, flat}, [flat, gather_list]() mutable { unflatten(flat, gather_list); });
}

std::shared_ptr<Work> scatter_async(at::Tensor& tensor, const std::vector<at::Tensor>& scatter_list, int src,
                                    const GroupPtr& group) {
  auto g = resolve(group);
  auto out = to_buffer(tensor);
  if (g->rank() != src) {
    if (!scatter_list.empty()) {
      throw InvalidArgument(cat("scatter: only the source rank ", src, " passes a scatter_list; rank ", g->rank(),
                                " passed ", scatter_list.size(), " tensors"));
    }
    return hold(g->scatter(Buffer{nullptr, 0, out.dtype, out.device}, out, src), {tensor});
  }
  check_list(scatter_list, tensor, static_cast<std::size_t>(g->size()), "scatter_list");
  at::Tensor flat = flatten(scatter_list);
  return hold(g->scatter(to_buffer(flat), out, src), {tensor, flat});
}

std::shared_ptr<Work> isend(const at::Tensor& tensor, int dst, const GroupPtr& group, int tag) {
  if (tag < 0) throw InvalidArgument(cat("send: tag ", tag, " is negative"));
  return hold(resolve(group)->send(to_buffer(tensor), dst, static_cast<std::uint32_t>(tag)), {tensor});
}

std::shared_ptr<Work> irecv(at::Tensor& tensor, int src, const GroupPtr& group, int tag) {
  if (tag < 0) throw InvalidArgument(cat("recv: tag ", tag, " is negative"));
  return hold(resolve(group)->recv(to_buffer(tensor), src, static_cast<std::uint32_t>(tag)), {tensor});
}

// The blocking forms.
void all_reduce(at::Tensor& t, ReduceOp op, const GroupPtr& g) { all_reduce_async(t, op, g)->wait(); }
void broadcast(at::Tensor& t, int src, const GroupPtr& g) { broadcast_async(t, src, g)->wait(); }
void reduce(at::Tensor& t, int dst, ReduceOp op, const GroupPtr& g) { reduce_async(t, dst, op, g)->wait(); }
void all_gather(std::vector<at::Tensor>& o, const at::Tensor& t, const GroupPtr& g) { all_gather_async(o, t, g)->wait(); }
void all_gather_into_tensor(at::Tensor& o, const at::Tensor& i, const GroupPtr& g) {
  all_gather_into_tensor_async(o, i, g)->wait();
}
void reduce_scatter(at::Tensor& o, const std::vector<at::Tensor>& i, ReduceOp op, const GroupPtr& g) {
  reduce_scatter_async(o, i, op, g)->wait();
}
void reduce_scatter_tensor(at::Tensor& o, const at::Tensor& i, ReduceOp op, const GroupPtr& g) {
  reduce_scatter_tensor_async(o, i, op, g)->wait();
}
void all_to_all(std::vector<at::Tensor>& o, const std::vector<at::Tensor>& i, const GroupPtr& g) {
  all_to_all_async(o, i, g)->wait();
}
void all_to_all_single(at::Tensor& o, const at::Tensor& i, const GroupPtr& g) { all_to_all_single_async(o, i, g)->wait(); }
void gather(const at::Tensor& t, std::vector<at::Tensor>& l, int dst, const GroupPtr& g) { gather_async(t, l, dst, g)->wait(); }
void scatter(at::Tensor& t, const std::vector<at::Tensor>& l, int src, const GroupPtr& g) {
  scatter_async(t, l, src, g)->wait();
}
void send(const at::Tensor& t, int dst, const GroupPtr& g, int tag) { isend(t, dst, g, tag)->wait(); }
void recv(at::Tensor& t, int src, const GroupPtr& g, int tag) { irecv(t, src, g, tag)->wait(); }

}  // namespace ddp
