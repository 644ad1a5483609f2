// The store server's key space without sockets: what each change answers and whom it tells.
#include "store/key_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "ddp/error.h"

namespace ddp::detail {
namespace {

using namespace std::chrono_literals;
using Want = KeySpace::Want;
using Change = KeySpace::Change;
using Ids = std::vector<KeySpace::ClientId>;

Ids clients_of(const std::vector<KeySpace::Answer>& answers) {
  Ids ids;
  for (const auto& a : answers) ids.push_back(a.client);
  std::sort(ids.begin(), ids.end());
  return ids;
}

const KeySpace::Answer& answer_for(const std::vector<KeySpace::Answer>& answers, KeySpace::ClientId client) {
  auto it = std::find_if(answers.begin(), answers.end(), [&](const auto& a) { return a.client == client; });
  if (it == answers.end()) throw std::runtime_error("no answer for client " + std::to_string(client));
  return *it;
}

void expect_notice(const KeySpace::Effects& effects, Change change, const std::string& key,
                   const std::string& old_value, const std::string& new_value, const Ids& watchers) {
  ASSERT_TRUE(effects.notice.has_value());
  EXPECT_EQ(effects.notice->change, change);
  EXPECT_EQ(effects.notice->key, key);
  EXPECT_EQ(effects.notice->old_value, old_value);
  EXPECT_EQ(effects.notice->new_value, new_value);
  EXPECT_EQ(effects.notice->watchers, watchers);
}

}  // namespace

TEST(KeySpace, ASetWakesParkedGetsAndWaitsOfEitherProtocol) {
  KeySpace keys;
  const auto soon = KeySpace::Clock::now() + 1h;
  EXPECT_FALSE(keys.wait(1, Want::Value, {"go"}, soon));          // ddp get
  EXPECT_FALSE(keys.wait(2, Want::Keys, {"go"}, soon));           // ddp wait
  EXPECT_FALSE(keys.wait(3, Want::Keys, {"go"}));                 // PyTorch wait: no deadline
  EXPECT_FALSE(keys.wait(4, Want::Keys, {"go", "later"}, soon));  // needs both keys
  EXPECT_FALSE(keys.wait(5, Want::Keys, {"other"}, soon));
  EXPECT_TRUE(keys.set("unrelated", "x").answers.empty());

  auto effects = keys.set("go", "now");
  EXPECT_FALSE(effects.notice);  // nobody watches "go"
  EXPECT_EQ(clients_of(effects.answers), (Ids{1, 2, 3}));
  EXPECT_EQ(answer_for(effects.answers, 1).want, Want::Value);
  EXPECT_EQ(answer_for(effects.answers, 1).value, "now");
  EXPECT_TRUE(answer_for(effects.answers, 1).missing.empty());
  EXPECT_EQ(answer_for(effects.answers, 2).want, Want::Keys);
  EXPECT_TRUE(answer_for(effects.answers, 3).missing.empty());
  for (int client : {1, 2, 3}) EXPECT_FALSE(keys.is_parked(client)) << client;
  EXPECT_TRUE(keys.is_parked(4));
  EXPECT_TRUE(keys.is_parked(5));

  EXPECT_TRUE(keys.set("go", "again").answers.empty());  // answered once only
  EXPECT_EQ(clients_of(keys.set("later", "1").answers), (Ids{4}));
}

TEST(KeySpace, AWaitForKeysThatExistIsAnsweredAtOnce) {
  KeySpace keys;
  keys.set("a", "1");
  keys.set("b", "2");
  auto now = keys.wait(7, Want::Value, {"b"});
  ASSERT_TRUE(now);
  EXPECT_EQ(now->client, 7);
  EXPECT_EQ(now->value, "2");
  EXPECT_TRUE(now->missing.empty());
  EXPECT_TRUE(keys.wait(7, Want::Keys, {"a", "b"}));
  EXPECT_TRUE(keys.wait(7, Want::Keys, {}));
  EXPECT_FALSE(keys.is_parked(7));
  EXPECT_EQ(keys.next_deadline(), KeySpace::kNoDeadline);
}

TEST(KeySpace, AMultiGetIsAnsweredWithEveryValueInItsKeysOrderOnceTheLastArrives) {
  KeySpace keys;
  keys.set("b", "2");
  auto now = keys.wait(1, Want::Values, {"b", "b"});  // present: at once, repeats kept
  ASSERT_TRUE(now);
  EXPECT_EQ(now->values, (std::vector<std::string>{"2", "2"}));
  EXPECT_TRUE(keys.wait(1, Want::Values, {})->values.empty());

  EXPECT_FALSE(keys.wait(2, Want::Values, {"c", "a", "b"}, KeySpace::Clock::now() + 1h));
  EXPECT_TRUE(keys.set("a", "1").answers.empty());  // "c" is still missing
  keys.erase("b");                                  // a present key may go again
  EXPECT_TRUE(keys.set("c", "3").answers.empty());  // now "b" is missing
  auto effects = keys.set("b", "two");
  ASSERT_EQ(clients_of(effects.answers), (Ids{2}));
  EXPECT_EQ(effects.answers[0].want, Want::Values);
  EXPECT_EQ(effects.answers[0].values, (std::vector<std::string>{"3", "1", "two"}));
  EXPECT_TRUE(effects.answers[0].missing.empty());

  // Expired: the missing keys, no values.
  const auto t0 = KeySpace::Clock::now();
  EXPECT_FALSE(keys.wait(3, Want::Values, {"a", "never"}, t0 + 10ms));
  auto expired = keys.expire(t0 + 10ms);
  ASSERT_EQ(clients_of(expired), (Ids{3}));
  EXPECT_EQ(expired[0].missing, (std::vector<std::string>{"never"}));
  EXPECT_TRUE(expired[0].values.empty());
}

TEST(KeySpace, DeadlinesExpireInOrderNamingTheMissingKeys) {
  KeySpace keys;
  const auto t0 = KeySpace::Clock::now();
  keys.set("present", "1");
  EXPECT_FALSE(keys.wait(1, Want::Keys, {"present", "absent"}, t0 + 100ms));
  EXPECT_FALSE(keys.wait(2, Want::Value, {"absent-too"}, t0 + 50ms));
  EXPECT_FALSE(keys.wait(3, Want::Keys, {"absent"}));  // no deadline: never expires
  EXPECT_EQ(keys.next_deadline(), t0 + 50ms);

  EXPECT_TRUE(keys.expire(t0 + 49ms).empty());
  auto first = keys.expire(t0 + 50ms);
  ASSERT_EQ(clients_of(first), (Ids{2}));
  EXPECT_EQ(first[0].missing, (std::vector<std::string>{"absent-too"}));
  EXPECT_EQ(keys.next_deadline(), t0 + 100ms);

  auto second = keys.expire(t0 + 1h);
  ASSERT_EQ(clients_of(second), (Ids{1}));
  EXPECT_EQ(second[0].missing, (std::vector<std::string>{"absent"}));
  EXPECT_EQ(keys.next_deadline(), KeySpace::kNoDeadline);
  EXPECT_TRUE(keys.expire(KeySpace::Clock::time_point::max()).empty());

  // The expired waits are gone: the key now wakes only the one without a deadline.
  EXPECT_EQ(clients_of(keys.set("absent", "here").answers), (Ids{3}));
}

TEST(KeySpace, WatchersHearOfEveryChangeOnceWithTheOldValue) {
  KeySpace keys;
  keys.watch(10, "w");
  keys.watch(11, "w");
  keys.watch(11, "w");  // twice: still told once
  keys.watch(12, "elsewhere");

  expect_notice(keys.set("w", "1"), Change::Created, "w", "", "1", {10, 11});
  expect_notice(keys.set("w", "2"), Change::Updated, "w", "1", "2", {10, 11});

  auto [sum, added] = keys.add("w", 3);
  EXPECT_EQ(sum, 5);
  expect_notice(added, Change::Updated, "w", "2", "5", {10, 11});

  auto [swapped, set] = keys.compare_set("w", "5", "six");
  EXPECT_EQ(swapped, "six");
  expect_notice(set, Change::Updated, "w", "5", "six", {10, 11});

  auto [kept, unchanged] = keys.compare_set("w", "5", "seven");  // no match: no change, no notice
  EXPECT_EQ(kept, "six");
  EXPECT_FALSE(unchanged.notice);

  EXPECT_THROW(keys.add("w", 1), InvalidArgument);  // "six" is no counter: nothing changes
  EXPECT_EQ(*keys.find("w"), "six");

  expect_notice(keys.append("w", "+", 100), Change::Updated, "w", "six", "six+", {10, 11});
}

TEST(KeySpace, OnlyWatchedKeysCarryANotice) {
  KeySpace keys;
  keys.watch(1, "watched");
  EXPECT_FALSE(keys.set("other", "x").notice);
  EXPECT_FALSE(keys.add("n", 1).effects.notice);
  EXPECT_TRUE(keys.set("watched", "x").notice);
}

TEST(KeySpace, DeletingAKeyTellsItsWatchersAndWaitsForItAgain) {
  KeySpace keys;
  keys.set("a", "1");
  keys.watch(9, "a");
  EXPECT_FALSE(keys.wait(1, Want::Keys, {"a", "b"}));

  auto [existed, deleted] = keys.erase("a");
  EXPECT_TRUE(existed);
  expect_notice(deleted, Change::Deleted, "a", "1", "", {9});
  EXPECT_TRUE(deleted.answers.empty());
  EXPECT_EQ(keys.find("a"), nullptr);
  EXPECT_EQ(keys.size(), 0u);

  auto [again, nothing] = keys.erase("a");
  EXPECT_FALSE(again);
  EXPECT_FALSE(nothing.notice);

  // The wait needs "a" back as well as "b".
  EXPECT_TRUE(keys.set("b", "2").answers.empty());
  EXPECT_EQ(clients_of(keys.set("a", "back").answers), (Ids{1}));
}

TEST(KeySpace, AddAndCompareSetWakeWaitersAsASetDoes) {
  KeySpace keys;
  EXPECT_FALSE(keys.wait(1, Want::Value, {"n"}));
  auto added = keys.add("n", 4);
  ASSERT_EQ(clients_of(added.effects.answers), (Ids{1}));
  EXPECT_EQ(added.effects.answers[0].value, "4");

  EXPECT_FALSE(keys.wait(2, Want::Keys, {"cas"}));
  EXPECT_TRUE(keys.compare_set("cas", "not-there", "x").effects.answers.empty());  // missing, expected set: no write
  EXPECT_EQ(clients_of(keys.compare_set("cas", "", "x").effects.answers), (Ids{2}));
}

TEST(KeySpace, AnAddThatOverflowsIsRefusedAndChangesNothing) {
  KeySpace keys;
  keys.watch(1, "n");
  EXPECT_EQ(keys.add("n", std::numeric_limits<std::int64_t>::max()).value, std::numeric_limits<std::int64_t>::max());
  try {
    keys.add("n", 1);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("store add(\"n\", 1): the counter holds 9223372036854775807 and the sum "
                                         "does not fit in 64 bits"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(*keys.find("n"), "9223372036854775807");
  keys.set("low", std::to_string(std::numeric_limits<std::int64_t>::min()));
  EXPECT_THROW(keys.add("low", -1), InvalidArgument);
  EXPECT_EQ(keys.add("low", 1).value, std::numeric_limits<std::int64_t>::min() + 1);
}

TEST(KeySpace, AppendPastTheLimitChangesNothing) {
  KeySpace keys;
  keys.append("log", "abc", 5);
  EXPECT_EQ(*keys.find("log"), "abc");
  try {
    keys.append("log", "def", 5);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("append to \"log\" would make a value of 6 bytes, over the limit of 5"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(*keys.find("log"), "abc");
}

TEST(KeySpace, ACanceledWaitIsForgotten) {
  KeySpace keys;
  EXPECT_FALSE(keys.cancel_wait(1));
  EXPECT_FALSE(keys.wait(1, Want::Keys, {"k"}, KeySpace::Clock::now() + 1h));
  EXPECT_TRUE(keys.cancel_wait(1));
  EXPECT_FALSE(keys.is_parked(1));
  EXPECT_EQ(keys.next_deadline(), KeySpace::kNoDeadline);
  EXPECT_TRUE(keys.set("k", "v").answers.empty());
}

TEST(KeySpace, AClientThatGoesAwayDropsItsWaitAndWatches) {
  KeySpace keys;
  keys.watch(1, "a");
  keys.watch(1, "b");
  keys.watch(2, "a");
  EXPECT_FALSE(keys.wait(1, Want::Keys, {"k"}, KeySpace::Clock::now() + 1h));
  EXPECT_FALSE(keys.wait(2, Want::Keys, {"k"}));

  keys.drop(1);
  EXPECT_FALSE(keys.is_parked(1));
  EXPECT_EQ(keys.next_deadline(), KeySpace::kNoDeadline);
  EXPECT_EQ(clients_of(keys.set("k", "v").answers), (Ids{2}));
  expect_notice(keys.set("a", "1"), Change::Created, "a", "", "1", {2});
  EXPECT_FALSE(keys.set("b", "1").notice);  // its only watcher left
  keys.drop(1);                             // twice, or a client that never waited: nothing to do
  keys.drop(3);
}

TEST(KeySpace, ANewWaitReplacesTheClientsParkedOne) {
  KeySpace keys;
  EXPECT_FALSE(keys.wait(1, Want::Keys, {"old"}, KeySpace::Clock::now() + 1h));
  EXPECT_FALSE(keys.wait(1, Want::Keys, {"new"}));
  EXPECT_EQ(keys.next_deadline(), KeySpace::kNoDeadline);
  EXPECT_TRUE(keys.set("old", "x").answers.empty());
  EXPECT_EQ(clients_of(keys.set("new", "x").answers), (Ids{1}));
}

}  // namespace ddp::detail
