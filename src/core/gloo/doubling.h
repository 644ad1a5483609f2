// Recursive doubling: the all_reduce schedule for small buffers across TCP. Gloo's ring takes
// 2(n - 1) rounds, each a wake-up of the next rank; this takes log2(n) rounds, each rank swapping
// its whole buffer with one partner (plus one round in and one out for the ranks beyond the
// largest power of two). Where each round costs a wake-up and a few microseconds of latency rather
// than bandwidth, fewer rounds are faster (docs/COLLECTIVES.md, "Small all_reduce across TCP").
#pragma once

#include <vector>

namespace ddp::detail {

struct DoublingStep {
  enum Kind {
    Send,      // send my buffer to `peer`
    Fold,      // receive `peer`'s buffer and reduce it into mine
    Exchange,  // swap buffers with `peer`; both reduce
    Receive,   // receive the result from `peer` into my buffer
  };
  Kind kind;
  int peer;
  // Fold/Exchange: whether my buffer is the reduction's left operand. Every reduction takes the
  // lower rank's data first, so partners compute the same bits and every rank ends with them.
  bool mine_first;
  // The schedule's round, the same on both sides of a step: 0 the pairing up, 1..log2(p) the
  // exchanges, log2(p) + 1 the result's return. Messages are matched by it.
  int round;
};

// This rank's steps of an all_reduce among `size` ranks (size >= 1; none for one rank). The ranks
// beyond the largest power of two p <= size (r = size - p of them) pair up first: rank 2i sends to
// 2i + 1 for i < r, sits out, and receives the result from it at the end.
std::vector<DoublingStep> recursive_doubling(int rank, int size);

}  // namespace ddp::detail
