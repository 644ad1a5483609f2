#include "group/execute.h"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "ddp/error.h"
#include "group/emulation.h"
#include "util/strings.h"

namespace ddp::detail {

void execute(Backend& backend, const Op& op, Backend::Deadline deadline) {
  switch (op.type) {
    case OpType::AllReduce:
    case OpType::Reduce:
    case OpType::ReduceScatter: return run_reduction(backend, op, deadline);
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

}  // namespace ddp::detail
