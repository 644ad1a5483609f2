#include "group/emulation.h"

#include <cstring>
#include <vector>

#include "ddp/error.h"
#include "reduce/reduce.h"
#include "util/buffers.h"
#include "util/strings.h"

namespace ddp {

using detail::copy_of;
using detail::over;

// The optional methods' defaults (ddp/backend.h), for host buffers.

void Backend::reduce(Buffer data, ReduceOp op, int root, Deadline deadline) {
  if (rank() == root) return all_reduce(data, op, deadline);
  std::vector<char> scratch = copy_of(data);  // the others' data stays as it was
  all_reduce(over(scratch, data, data.count), op, deadline);
}

void Backend::gather(Buffer input, Buffer output, int root, Deadline deadline) {
  if (rank() == root) return all_gather(input, output, deadline);
  std::vector<char> scratch(input.bytes() * size());
  all_gather(input, over(scratch, input, input.count * size()), deadline);
}

void Backend::scatter(Buffer input, Buffer output, int root, Deadline deadline) {
  std::vector<char> scratch = rank() == root ? copy_of(input) : std::vector<char>(output.bytes() * size());
  broadcast(over(scratch, output, output.count * size()), root, deadline);
  std::memcpy(output.data, scratch.data() + rank() * output.bytes(), output.bytes());
}

void Backend::reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) {
  std::vector<char> scratch = copy_of(input);
  all_reduce(over(scratch, input, input.count), op, deadline);
  std::memcpy(output.data, scratch.data() + rank() * output.bytes(), output.bytes());
}

void Backend::all_to_all(Buffer input, Buffer output, Deadline deadline) {
  const std::size_t piece = input.bytes() / size();  // chunk j of rank i goes to chunk i of rank j
  std::vector<char> everyone(input.bytes() * size());
  all_gather(input, over(everyone, input, input.count * size()), deadline);
  for (int from = 0; from < size(); ++from) {
    std::memcpy(static_cast<char*>(output.data) + from * piece, everyone.data() + from * input.bytes() + rank() * piece,
                piece);
  }
}

namespace detail {
namespace {

bool is_half(DataType t) { return t == DataType::Float16 || t == DataType::BFloat16; }

Buffer float32_view(std::vector<float>& storage, const Buffer& like) {
  return Buffer{storage.data(), storage.size(), DataType::Float32, like.device};
}

}  // namespace

void run_reduction(Backend& backend, const Op& op, Backend::Deadline deadline) {
  const DataType dtype = op.input.dtype;
  if (backend.supports(dtype, op.reduce_op)) {
    switch (op.type) {
      case OpType::AllReduce: return backend.all_reduce(op.input, op.reduce_op, deadline);
      case OpType::Reduce: return backend.reduce(op.input, op.reduce_op, op.root, deadline);
      default: return backend.reduce_scatter(op.input, op.output, op.reduce_op, deadline);
    }
  }
  if (is_half(dtype) && op.input.device.is_cpu()) {
    // Accumulate in float32: widen, reduce, narrow once.
    std::vector<float> in(op.input.count), out;
    widen_to_float32(op.input.data, in.data(), in.size(), dtype);
    Op wide = op;
    wide.input = float32_view(in, op.input);
    wide.output = wide.input;
    if (op.type == OpType::ReduceScatter) {
      out.resize(op.output.count);
      wide.output = float32_view(out, op.output);
    }
    run_reduction(backend, wide, deadline);
    narrow_from_float32(static_cast<const float*>(wide.output.data), op.output.data, op.output.count, dtype);
    return;
  }
  if (op.reduce_op == ReduceOp::AVG && backend.supports(dtype, ReduceOp::SUM)) {
    Op sum = op;
    sum.reduce_op = ReduceOp::SUM;
    run_reduction(backend, sum, deadline);
    if (op.type != OpType::Reduce || backend.rank() == op.root) {
      divide(op.output.data, op.output.count, dtype, backend.size());
    }
    return;
  }
  throw InvalidArgument(cat("the ", backend.name(), " backend cannot reduce ", to_string(dtype), " with ",
                            to_string(op.reduce_op), " on ", to_string(op.input.device)));
}

}  // namespace detail
}  // namespace ddp
