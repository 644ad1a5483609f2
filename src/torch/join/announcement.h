// The join's per-iteration announcement, as numbers: what each rank contributes to the
// all-reduce (SUM) and what the sum says. Pure.
//
// Layout, for a group of `world` ranks: slot r is 1 when rank r still trains; slot world counts
// the training ranks whose DDP broadcasts buffers in this iteration, slot world + 1 those whose
// backward synchronizes gradients. A rank that has joined contributes zeros.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddp/torch/join.h"

namespace ddp::detail {

struct Announcement {
  std::vector<int> training;  // group ranks still training, ascending
  JoinIteration iteration;
};

// What rank `rank` of `world` contributes.
std::vector<float> announcement_contribution(int rank, int world, bool training, const JoinIteration& iteration);

// What the sum over the ranks says. Throws Error when it is not a sum of contributions
// (ranks that disagree about the join: some call it, some do not).
Announcement decode_announcement(const std::vector<float>& sum, int world);

// The message every rank throws with throw_on_early_termination, once ranks have run out.
std::string early_termination_message(const std::vector<int>& training, int world);

// The group ranks (of a group whose rank g is global rank `members[g]`) that take part in a
// communication among the ranks still training, given the join's group (`join_members`, global
// ranks by group rank) and the ranks training in it. nullopt: all of them (a member outside the
// join's group counts as training).
std::optional<std::vector<int>> training_members(const std::vector<int>& members, const std::vector<int>& join_members,
                                                 const std::vector<int>& training);

}  // namespace ddp::detail
