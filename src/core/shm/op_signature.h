// What a rank's shared-memory op is, in one word that its peers compare before they use its data:
// ranks that call different collectives at the same point (a barrier against an all_reduce, two
// sizes, two roots) fail at once with a MismatchError naming both ops, instead of reading each
// other's buffers as if they were the same op. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ddp/types.h"

namespace ddp::detail::shm {

enum class OpKind : std::uint8_t {
  AllReduce = 1,
  Reduce,
  ReduceScatter,
  Broadcast,
  AllGather,
  Barrier,
  ReduceShare,
  GatherShares
};

// Never 0 (0 marks a step that continues an op). The reduction and the dtype count only for the
// reducing ops (broadcast and all_gather move bytes: `count` is then their byte count); counts
// past 2^40 share their low 40 bits; `root` (an index on the host, or -1) up to 4094.
std::uint64_t op_signature(OpKind kind, DataType dtype, std::size_t count, ReduceOp op = ReduceOp::SUM, int root = -1);

// "all_reduce (float32 x 16, SUM)", "broadcast (4096 bytes from host rank 1)", "barrier"; for 0,
// "a later step of an op it began earlier".
std::string describe_op(std::uint64_t signature);

}  // namespace ddp::detail::shm
