// recursive_doubling's schedule, run symbolically: every rank's buffer is an expression over the
// ranks' inputs, so the test sees both that each input is counted once and that every rank computes
// the same expression in the same order (the same bits, for a non-associative float sum).
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "gloo/doubling.h"

namespace ddp::detail {
namespace {

using Kind = DoublingStep::Kind;

// The buffers after every rank has run its steps, round by round; fails on an unmatched message.
std::vector<std::string> run_schedule(int size) {
  std::vector<std::vector<DoublingStep>> steps(size);
  int last_round = 0;
  for (int r = 0; r < size; ++r) {
    steps[r] = recursive_doubling(r, size);
    for (const auto& s : steps[r]) {
      EXPECT_GE(s.peer, 0);
      EXPECT_LT(s.peer, size);
      EXPECT_NE(s.peer, r);
      last_round = std::max(last_round, s.round);
    }
  }
  std::vector<std::string> buffer(size);
  for (int r = 0; r < size; ++r) buffer[r] = std::to_string(r);
  for (int round = 0; round <= last_round; ++round) {
    std::map<int, DoublingStep> now;  // rank -> its step in this round (at most one)
    for (int r = 0; r < size; ++r) {
      for (const auto& s : steps[r]) {
        if (s.round != round) continue;
        EXPECT_FALSE(now.count(r)) << "rank " << r << " has two steps in round " << round;
        now[r] = s;
      }
    }
    const auto sent = buffer;  // what each rank sends this round
    for (const auto& [r, s] : now) {
      if (!now.count(s.peer)) {
        ADD_FAILURE() << "rank " << r << "'s partner " << s.peer << " idles in round " << round;
        return {};
      }
      const DoublingStep& other = now.at(s.peer);
      EXPECT_EQ(other.peer, r);
      const bool sends = s.kind == Kind::Send || s.kind == Kind::Exchange;
      const bool receives = s.kind != Kind::Send;
      EXPECT_EQ(sends, other.kind != Kind::Send) << "round " << round << ", ranks " << r << " and " << s.peer;
      EXPECT_EQ(receives, other.kind == Kind::Send || other.kind == Kind::Exchange);
      if (s.kind == Kind::Fold || s.kind == Kind::Exchange) {
        if (other.kind == Kind::Exchange) {
          EXPECT_NE(s.mine_first, other.mine_first);
        }
        EXPECT_EQ(s.mine_first, r < s.peer);
        buffer[r] = s.mine_first ? "(" + sent[r] + "+" + sent[s.peer] + ")" : "(" + sent[s.peer] + "+" + sent[r] + ")";
      }
      if (s.kind == Kind::Receive) buffer[r] = sent[s.peer];
    }
  }
  return buffer;
}

TEST(RecursiveDoubling, EveryRankEndsWithTheSameSumOfEveryInputOnce) {
  for (int size = 1; size <= 33; ++size) {
    SCOPED_TRACE("size " + std::to_string(size));
    const auto buffers = run_schedule(size);
    ASSERT_EQ(buffers.size(), static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) EXPECT_EQ(buffers[r], buffers[0]) << "rank " << r;
    for (int input = 0; input < size; ++input) {
      int count = 0;
      std::string token;
      for (char c : buffers[0] + "+") {
        if (std::isdigit(static_cast<unsigned char>(c))) {
          token += c;
        } else if (!token.empty()) {
          count += std::stoi(token) == input;
          token.clear();
        }
      }
      EXPECT_EQ(count, 1) << "input " << input << " in " << buffers[0];
    }
  }
}

TEST(RecursiveDoubling, TakesLog2RoundsAndTwoMoreBeyondAPowerOfTwo) {
  EXPECT_TRUE(recursive_doubling(0, 1).empty());
  EXPECT_EQ(recursive_doubling(0, 2).size(), 1u);
  EXPECT_EQ(recursive_doubling(3, 8).size(), 3u);
  // 6 ranks: 2 beyond 4. Ranks 0 and 2 fold into 1 and 3, and wait for the result.
  const auto folded = recursive_doubling(2, 6);
  ASSERT_EQ(folded.size(), 2u);
  EXPECT_EQ(folded[0].kind, Kind::Send);
  EXPECT_EQ(folded[0].peer, 3);
  EXPECT_EQ(folded[1].kind, Kind::Receive);
  EXPECT_EQ(folded[1].round, 3);
  const auto worker = recursive_doubling(3, 6);
  ASSERT_EQ(worker.size(), 4u);  // fold, two exchanges, send back
  EXPECT_EQ(worker[0].kind, Kind::Fold);
  EXPECT_EQ(worker[3].kind, Kind::Send);
  EXPECT_EQ(recursive_doubling(5, 6).size(), 2u);
}

}  // namespace
}  // namespace ddp::detail
