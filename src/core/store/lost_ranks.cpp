#include "store/lost_ranks.h"

#include "ddp/store.h"

namespace ddp::detail {

std::string lost_rank_key(int rank) { return "__ddp/lost/" + std::to_string(rank); }

std::vector<std::pair<int, std::string>> find_lost_ranks(Store& store, const std::vector<int>& ranks) {
  std::vector<std::pair<int, std::string>> lost;
  try {
    for (int rank : ranks) {
      const std::string key = lost_rank_key(rank);
      if (store.check({key})) lost.emplace_back(rank, store.get(key));
    }
  } catch (...) {
  }
  return lost;
}

}  // namespace ddp::detail
