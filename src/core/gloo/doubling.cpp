#include "gloo/doubling.h"

namespace ddp::detail {

std::vector<DoublingStep> recursive_doubling(int rank, int size) {
  int p = 1;
  while (p * 2 <= size) p *= 2;
  const int extra = size - p;
  int rounds = 0;  // log2(p)
  while ((1 << rounds) < p) ++rounds;
  std::vector<DoublingStep> steps;
  if (rank < 2 * extra && rank % 2 == 0) {  // folds into its odd neighbour, which works for both
    steps.push_back({DoublingStep::Send, rank + 1, false, 0});
    steps.push_back({DoublingStep::Receive, rank + 1, false, rounds + 1});
    return steps;
  }
  if (rank < 2 * extra) steps.push_back({DoublingStep::Fold, rank - 1, false, 0});
  // Among the p that go on, index i is rank 2i + 1 for i < extra, else rank i + extra.
  const int index = rank < 2 * extra ? rank / 2 : rank - extra;
  const auto rank_of = [extra](int i) { return i < extra ? 2 * i + 1 : i + extra; };
  for (int round = 1; round <= rounds; ++round) {
    const int partner = index ^ (1 << (round - 1));
    steps.push_back({DoublingStep::Exchange, rank_of(partner), index < partner, round});
  }
  if (rank < 2 * extra) steps.push_back({DoublingStep::Send, rank - 1, false, rounds + 1});
  return steps;
}

}  // namespace ddp::detail
