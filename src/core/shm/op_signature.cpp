#include "shm/op_signature.h"

#include "util/strings.h"

namespace ddp::detail::shm {
namespace {

// kind: bits 60-63, dtype 56-59, reduction 52-55, root + 1: 40-51, count: 0-39.
constexpr std::uint64_t kCountMask = (std::uint64_t{1} << 40) - 1;
constexpr int kRootLimit = 4094;

bool reduces(OpKind kind) {
  return kind == OpKind::AllReduce || kind == OpKind::Reduce || kind == OpKind::ReduceScatter ||
         kind == OpKind::ReduceShare || kind == OpKind::GatherShares;
}

const char* name_of(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Reduce: return "reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::AllGather: return "all_gather";
    case OpKind::Barrier: return "barrier";
    case OpKind::ReduceShare: return "all_reduce's reduce within the host";
    case OpKind::GatherShares: return "all_reduce's gather within the host";
  }
  return "an unknown op";
}

}  // namespace

std::uint64_t op_signature(OpKind kind, DataType dtype, std::size_t count, ReduceOp op, int root) {
  const bool reducing = reduces(kind);
  const std::uint64_t root_bits = root < 0 || root > kRootLimit ? 0 : static_cast<std::uint64_t>(root) + 1;
  return (static_cast<std::uint64_t>(kind) << 60) | (reducing ? static_cast<std::uint64_t>(dtype) << 56 : 0) |
         (reducing ? static_cast<std::uint64_t>(op) << 52 : 0) | (root_bits << 40) | (count & kCountMask);
}

std::string describe_op(std::uint64_t signature) {
  if (signature == 0) return "a later step of an op it began earlier";
  const auto kind = static_cast<OpKind>(signature >> 60);
  const auto dtype = static_cast<DataType>((signature >> 56) & 0xf);
  const auto op = static_cast<ReduceOp>((signature >> 52) & 0xf);
  const std::uint64_t root = (signature >> 40) & 0xfff, count = signature & kCountMask;
  const std::string from = root ? cat(" from host rank ", root - 1) : "";
  const std::string to = root ? cat(", to host rank ", root - 1) : "";
  if (kind == OpKind::Barrier) return "barrier";
  if (kind == OpKind::Broadcast) return cat("broadcast (", count, " bytes", from, ")");
  if (kind == OpKind::AllGather) return cat("all_gather (", count, " bytes per rank)");
  if (reduces(kind)) return cat(name_of(kind), " (", to_string(dtype), " x ", count, ", ", to_string(op), to, ")");
  return name_of(kind);
}

}  // namespace ddp::detail::shm
