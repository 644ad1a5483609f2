#include "group/execute.h"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "ddp/error.h"
#include "reduce/reduce.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

bool is_half(DataType t) { return t == DataType::Float16 || t == DataType::BFloat16; }

Buffer float32_view(std::vector<float>& storage, const Buffer& like) {
  return Buffer{storage.data(), storage.size(), DataType::Float32, like.device};
}

// Runs a reducing op (all_reduce, reduce, reduce_scatter) whose result lands in op.output,
// emulating what the backend does not support.
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

}  // namespace

void execute(Backend& backend, const Op& op, Backend::Deadline deadline) {
  switch (op.type) {
    case OpType::AllReduce:
    case OpType::Reduce:
    case OpType::ReduceScatter:
      return run_reduction(backend, op, deadline);
    case OpType::Broadcast: return backend.broadcast(op.input, op.root, deadline);
    case OpType::AllGather: return backend.all_gather(op.input, op.output, deadline);
    case OpType::Gather: return backend.gather(op.input, op.output, op.root, deadline);
    case OpType::Scatter: return backend.scatter(op.input, op.output, op.root, deadline);
    case OpType::AllToAll: return backend.all_to_all(op.input, op.output, deadline);
    case OpType::Barrier: return backend.barrier(deadline);
    case OpType::Send:
    case OpType::Recv: break;
  }
  throw InvalidArgument(cat("execute: ", to_string(op.type), " is not a collective"));
}

void check_agreement(Backend& backend, const Op& op, Backend::Deadline deadline) {
  const Fingerprint mine = fingerprint(op);
  std::vector<std::uint8_t> all(mine.size() * static_cast<std::size_t>(backend.size()));
  Buffer in{const_cast<std::uint8_t*>(mine.data()), mine.size(), DataType::UInt8};
  Buffer out{all.data(), all.size(), DataType::UInt8};
  backend.all_gather(in, out, deadline);
  bool agree = true;
  std::vector<std::string> calls;
  for (int r = 0; r < backend.size(); ++r) {
    Fingerprint theirs;
    std::memcpy(theirs.data(), all.data() + r * mine.size(), mine.size());
    agree = agree && theirs == mine;
    calls.push_back(cat("rank ", r, " called ", describe(theirs)));
  }
  if (!agree) {
    throw MismatchError(cat("ranks called different collectives at sequence number ", op.seq, ": ", join(calls, "; "),
                            ". Every rank must call the same collectives, with the same sizes and types, in the "
                            "same order."));
  }
}

bool debug_checks_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("DDP_DEBUG");
    if (!value) return false;
    std::string_view v = value;
    return !v.empty() && v != "0" && v != "OFF" && v != "off";
  }();
  return enabled;
}

}  // namespace ddp::detail
