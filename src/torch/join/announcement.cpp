#include "join/announcement.h"

#include <algorithm>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

std::string ranks_phrase(const std::vector<int>& ranks) {
  return cat(ranks.size() == 1 ? "rank " : "ranks ", join(ranks));
}

}  // namespace

std::vector<float> announcement_contribution(int rank, int world, bool training, const JoinIteration& iteration) {
  std::vector<float> values(static_cast<std::size_t>(world) + 2, 0.0f);
  if (!training) return values;
  values[static_cast<std::size_t>(rank)] = 1;
  values[static_cast<std::size_t>(world)] = iteration.broadcasts_buffers ? 1 : 0;
  values[static_cast<std::size_t>(world) + 1] = iteration.syncs_gradients ? 1 : 0;
  return values;
}

Announcement decode_announcement(const std::vector<float>& sum, int world) {
  auto malformed = [&](const std::string& what) {
    return Error(cat("ddp::join: the iteration's announcement makes no sense (", what,
                     "): the ranks disagree about the join. Every rank must run its training loop inside "
                     "ddp::join, with the same joinables in the same order and the same options."));
  };
  if (sum.size() != static_cast<std::size_t>(world) + 2) {
    throw malformed(cat(sum.size(), " values for a group of ", world));
  }
  Announcement a;
  for (int r = 0; r < world; ++r) {
    const float v = sum[static_cast<std::size_t>(r)];
    if (v == 1) a.training.push_back(r);
    else if (v != 0) throw malformed(cat("rank ", r, "'s slot holds ", v));
  }
  const auto count = static_cast<float>(a.training.size());
  auto flag = [&](float v, const char* name) {
    if (v != 0 && v != count) {
      throw malformed(cat(v, " of the ", a.training.size(), " training ranks say they ", name));
    }
    return v > 0;
  };
  a.iteration.broadcasts_buffers = flag(sum[static_cast<std::size_t>(world)], "broadcast buffers");
  a.iteration.syncs_gradients = flag(sum[static_cast<std::size_t>(world) + 1], "synchronize gradients");
  return a;
}

std::string early_termination_message(const std::vector<int>& training, int world) {
  std::vector<int> stopped;
  for (int r = 0; r < world; ++r) {
    if (!std::binary_search(training.begin(), training.end(), r)) stopped.push_back(r);
  }
  return cat("ddp::join: ", ranks_phrase(stopped), stopped.size() == 1 ? " has" : " have", " run out of inputs while ",
             ranks_phrase(training), training.size() == 1 ? " still trains" : " still train",
             " (throw_on_early_termination): every rank throws this error at the same iteration. Catch it on "
             "every rank, or give every rank the same number of batches, or leave throw_on_early_termination off "
             "so that the ranks still training go on without them.");
}

std::optional<std::vector<int>> training_members(const std::vector<int>& members, const std::vector<int>& join_members,
                                                 const std::vector<int>& training) {
  std::vector<int> taking_part;
  for (std::size_t g = 0; g < members.size(); ++g) {
    auto it = std::find(join_members.begin(), join_members.end(), members[g]);
    const bool in_join = it != join_members.end();
    const int join_rank = static_cast<int>(it - join_members.begin());
    if (!in_join || std::binary_search(training.begin(), training.end(), join_rank)) {
      taking_part.push_back(static_cast<int>(g));
    }
  }
  if (taking_part.size() == members.size()) return std::nullopt;
  return taking_part;
}

}  // namespace ddp::detail
