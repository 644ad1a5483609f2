// One operation of a process group: what to do, on which buffers, and its place in the group's
// sequence. Pure data plus pure functions over it (validation, description, fingerprint).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ddp/types.h"

namespace ddp::detail {

enum class OpType : std::uint8_t {
  AllReduce = 1,
  Broadcast,
  Reduce,
  AllGather,
  Gather,
  Scatter,
  ReduceScatter,
  AllToAll,
  Barrier,
  Send,
  Recv,
};

std::string_view to_string(OpType type);

struct Op {
  OpType type = OpType::Barrier;
  std::uint64_t seq = 0;  // collectives: position in the group's sequence; p2p: its own counter
  Buffer input;           // in-place ops (all_reduce, broadcast, reduce, send, recv): the data
  Buffer output;
  ReduceOp reduce_op = ReduceOp::SUM;
  int root = 0;           // broadcast, reduce, gather, scatter
  int peer = -1;          // send: destination; recv: source
  std::uint32_t tag = 0;  // send/recv

  bool is_collective() const { return type != OpType::Send && type != OpType::Recv; }
  // The element count every rank must agree on.
  std::size_t agreed_count() const;
  // The element type every rank must agree on.
  DataType agreed_dtype() const;
};

// Throws InvalidArgument when `op` cannot run on rank `rank` of a group of `size`: a root or peer
// out of range, buffers of the wrong size or type, a bitwise reduction of floats, a null pointer.
void validate(const Op& op, int rank, int size);

// "all_reduce #12 (float32 x 1000, SUM)", "broadcast #3 (int64 x 5, root 0)", "barrier #9".
std::string describe(const Op& op);

// A fixed-size summary that every rank compares in debug mode; equal on every rank exactly when
// the ranks agree on what the collective is.
using Fingerprint = std::array<std::uint8_t, 24>;
Fingerprint fingerprint(const Op& op);
// The description of the op a fingerprint stands for (as describe()).
std::string describe(const Fingerprint& fingerprint);

}  // namespace ddp::detail
