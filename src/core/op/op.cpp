#include "op/op.h"

#include <cstring>

#include "ddp/error.h"
#include "reduce/reduce.h"
#include "util/strings.h"

namespace ddp::detail {

std::string_view to_string(OpType type) {
  switch (type) {
    case OpType::AllReduce: return "all_reduce";
    case OpType::Broadcast: return "broadcast";
    case OpType::Reduce: return "reduce";
    case OpType::AllGather: return "all_gather";
    case OpType::Gather: return "gather";
    case OpType::Scatter: return "scatter";
    case OpType::ReduceScatter: return "reduce_scatter";
    case OpType::AllToAll: return "all_to_all";
    case OpType::Barrier: return "barrier";
    case OpType::Send: return "send";
    case OpType::Recv: return "recv";
  }
  return "unknown op";
}

std::size_t Op::agreed_count() const {
  switch (type) {
    case OpType::Scatter:
    case OpType::ReduceScatter: return output.count;
    case OpType::Barrier: return 0;
    default: return input.count;
  }
}

DataType Op::agreed_dtype() const { return type == OpType::Scatter ? output.dtype : input.dtype; }

namespace {

bool has_root(OpType t) {
  return t == OpType::Broadcast || t == OpType::Reduce || t == OpType::Gather || t == OpType::Scatter;
}
bool has_reduce_op(OpType t) { return t == OpType::AllReduce || t == OpType::Reduce || t == OpType::ReduceScatter; }

void check_buffer(const Op& op, const Buffer& b, const char* which) {
  if (b.count > 0 && b.data == nullptr) {
    throw InvalidArgument(
        cat(to_string(op.type), ": the ", which, " buffer has ", b.count, " elements but a null data pointer"));
  }
}

void check_same_type(const Op& op) {
  if (op.input.dtype != op.output.dtype) {
    throw InvalidArgument(cat(to_string(op.type), ": the input is ", to_string(op.input.dtype), " but the output is ",
                              to_string(op.output.dtype), "; both must have the same element type"));
  }
  if (!(op.input.device == op.output.device)) {
    throw InvalidArgument(cat(to_string(op.type), ": the input is on ", to_string(op.input.device),
                              " but the output is on ", to_string(op.output.device), "; both must be on one device"));
  }
}

void check_count(const Op& op, const char* which, std::size_t actual, std::size_t expected, const char* rule) {
  if (actual != expected) {
    throw InvalidArgument(cat(to_string(op.type), ": the ", which, " holds ", actual, " elements but must hold ",
                              expected, " (", rule, ")"));
  }
}

}  // namespace

void validate(const Op& op, int rank, int size) {
  const auto name = to_string(op.type);
  if (has_root(op.type) && (op.root < 0 || op.root >= size)) {
    throw InvalidArgument(cat(name, ": root ", op.root, " is not a rank of this group (ranks 0 to ", size - 1, ")"));
  }
  if (op.type == OpType::Send || op.type == OpType::Recv) {
    const char* role = op.type == OpType::Send ? "destination" : "source";
    if (op.peer < 0 || op.peer >= size) {
      throw InvalidArgument(
          cat(name, ": ", role, " rank ", op.peer, " is not a rank of this group (ranks 0 to ", size - 1, ")"));
    }
    if (op.peer == rank) {
      throw InvalidArgument(
          cat(name, ": ", role, " rank ", op.peer, " is this rank; a rank cannot ", name, " to itself"));
    }
  }
  if (has_reduce_op(op.type) && !op_is_valid(op.input.dtype, op.reduce_op)) {
    throw InvalidArgument(cat(name, ": ", to_string(op.reduce_op),
                              " is a bitwise operation and needs an integer type, not ", to_string(op.input.dtype)));
  }
  check_buffer(op, op.input, "input");
  check_buffer(op, op.output, "output");
  const std::size_t n = static_cast<std::size_t>(size);
  switch (op.type) {
    case OpType::AllGather:
      check_same_type(op);
      check_count(op, "output", op.output.count, op.input.count * n, "world size x input");
      break;
    case OpType::Gather:
      if (rank == op.root) {
        check_same_type(op);
        check_count(op, "output", op.output.count, op.input.count * n, "world size x input, on the root");
      }
      break;
    case OpType::Scatter:
      if (rank == op.root) {
        check_same_type(op);
        check_count(op, "input", op.input.count, op.output.count * n, "world size x output, on the root");
      }
      break;
    case OpType::ReduceScatter:
      check_same_type(op);
      check_count(op, "input", op.input.count, op.output.count * n, "world size x output");
      break;
    case OpType::AllToAll:
      check_same_type(op);
      check_count(op, "output", op.output.count, op.input.count, "the same as the input");
      if (op.input.count % n != 0) {
        throw InvalidArgument(cat(name, ": ", op.input.count, " elements cannot be split into ", size,
                                  " equal chunks; the count must be a multiple of the world size"));
      }
      break;
    default: break;
  }
}

std::string describe(const Op& op) {
  std::string text = cat(to_string(op.type), " #", op.seq);
  if (op.type == OpType::Barrier) return text;
  text += cat(" (", to_string(op.agreed_dtype()), " x ", op.agreed_count());
  if (has_reduce_op(op.type)) text += cat(", ", to_string(op.reduce_op));
  if (has_root(op.type)) text += cat(", root ", op.root);
  if (op.type == OpType::Send) text += cat(", to rank ", op.peer, ", tag ", op.tag);
  if (op.type == OpType::Recv) text += cat(", from rank ", op.peer, ", tag ", op.tag);
  return text + ")";
}

// Layout: type, dtype, reduce op (0 when none), pad, root (i32, -1 when none), seq (u64), count (u64).
Fingerprint fingerprint(const Op& op) {
  Fingerprint f{};
  f[0] = static_cast<std::uint8_t>(op.type);
  f[1] = static_cast<std::uint8_t>(op.agreed_dtype());
  f[2] = has_reduce_op(op.type) ? static_cast<std::uint8_t>(op.reduce_op) + 1 : 0;
  std::int32_t root = has_root(op.type) ? op.root : -1;
  std::uint64_t seq = op.seq, count = op.type == OpType::Barrier ? 0 : op.agreed_count();
  std::memcpy(&f[4], &root, 4);
  std::memcpy(&f[8], &seq, 8);
  std::memcpy(&f[16], &count, 8);
  return f;
}

std::string describe(const Fingerprint& f) {
  Op op;
  op.type = static_cast<OpType>(f[0]);
  std::int32_t root;
  std::uint64_t count;
  std::memcpy(&root, &f[4], 4);
  std::memcpy(&op.seq, &f[8], 8);
  std::memcpy(&count, &f[16], 8);
  op.root = root;
  op.reduce_op = f[2] ? static_cast<ReduceOp>(f[2] - 1) : ReduceOp::SUM;
  Buffer b{nullptr, count, static_cast<DataType>(f[1])};
  op.input = b;
  op.output = b;
  if (f[0] < 1 || f[0] > static_cast<std::uint8_t>(OpType::Recv) || f[1] > static_cast<std::uint8_t>(DataType::Int64)) {
    return "an unrecognized operation";
  }
  return describe(op);
}

}  // namespace ddp::detail
