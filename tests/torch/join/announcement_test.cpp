// The join's announcement as numbers, without processes.
#include <gtest/gtest.h>

#include "ddp/error.h"
#include "join/announcement.h"
#include "support/expect_error.h"

namespace ddp::detail {
namespace {

using test::expect_error;

std::vector<float> sum_of(const std::vector<std::vector<float>>& contributions) {
  std::vector<float> sum(contributions.front().size(), 0);
  for (const auto& c : contributions) {
    for (std::size_t i = 0; i < c.size(); ++i) sum[i] += c[i];
  }
  return sum;
}

TEST(Announcement, TheSumNamesTheRanksStillTrainingAndWhatTheyDo) {
  const JoinIteration it{.broadcasts_buffers = true, .syncs_gradients = false};
  const auto sum = sum_of({announcement_contribution(0, 4, true, it), announcement_contribution(1, 4, false, {}),
                           announcement_contribution(2, 4, false, {}), announcement_contribution(3, 4, true, it)});
  const auto a = decode_announcement(sum, 4);
  EXPECT_EQ(a.training, (std::vector<int>{0, 3}));
  EXPECT_TRUE(a.iteration.broadcasts_buffers);
  EXPECT_FALSE(a.iteration.syncs_gradients);
}

TEST(Announcement, OnlyRanksThatJoinedMeanEveryoneHasJoined) {
  const auto a = decode_announcement(
      sum_of({announcement_contribution(0, 2, false, {}), announcement_contribution(1, 2, false, {})}), 2);
  EXPECT_TRUE(a.training.empty());
  EXPECT_FALSE(a.iteration.syncs_gradients);
}

TEST(Announcement, ASumThatNoContributionsMakeIsAnErrorSayingTheRanksDisagree) {
  // Ranks outside the join answered with another collective of the same size.
  expect_error<Error>(
      [] {
    decode_announcement({2, 0, 1, 1}, 2);
      },
      {"announcement makes no sense", "rank 0's slot holds 2", "same joinables"});
  expect_error<Error>([] { decode_announcement({1, 1, 1, 2}, 2); }, {"1 of the 2 training ranks say they broadcast"});
  expect_error<Error>([] { decode_announcement({1, 1, 0}, 2); }, {"3 values for a group of 2"});
}

TEST(Announcement, EarlyTerminationNamesTheRanksThatRanOut) {
  const auto one = early_termination_message({0, 2}, 3);
  EXPECT_EQ(one.rfind("ddp::join: rank 1 has run out of inputs while ranks 0, 2 still train (", 0), 0u) << one;
  const auto two = early_termination_message({1}, 3);
  EXPECT_NE(two.find("ranks 0, 2 have run out of inputs while rank 1 still trains"), std::string::npos) << two;
}

TEST(Announcement, TrainingMembersMapsTheJoinsRanksOntoAnotherGroup) {
  // The join runs on the world (global ranks 0..3); ranks 1 and 2 still train.
  const std::vector<int> world{0, 1, 2, 3};
  EXPECT_EQ(training_members({0, 1, 2, 3}, world, {1, 2}), (std::vector<int>{1, 2}));
  // A subgroup of global ranks 2 and 3: its rank 0 (global 2) still trains.
  EXPECT_EQ(training_members({2, 3}, world, {1, 2}), (std::vector<int>{0}));
  // Everyone in it trains: the group's own collectives will do.
  EXPECT_EQ(training_members({1, 2}, world, {1, 2}), std::nullopt);
  // A member outside the join's group counts as training.
  EXPECT_EQ(training_members({1, 5}, world, {1, 2}), std::nullopt);
  EXPECT_EQ(training_members({0, 5}, world, {1, 2}), (std::vector<int>{1}));
}

}  // namespace
}  // namespace ddp::detail
