// The hierarchical collectives' pipeline (cpu/pipeline.h): each stage in order, the link stage on
// its own thread and overlapping the others, a failure in any stage rethrown on the caller with
// nothing left running, and the chunking and thresholds every rank must compute alike.
#include "cpu/pipeline.h"
#include "cpu/hierarchy.h"
#include "ddp/error.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ddp::detail {
namespace {

using namespace std::chrono_literals;

struct Log {
  std::mutex mutex;
  std::vector<std::string> events;
  void add(char stage, std::size_t k) {
    std::lock_guard lock(mutex);
    events.push_back(std::string(1, stage) + std::to_string(k));
  }
  std::size_t at(const std::string& e) {
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i] == e) return i;
    }
    return events.size();
  }
};

TEST(Pipeline, EachStageRunsInOrderAndEveryChunkPassesThemInOrder) {
  Log log;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> second_on_caller{false};
  run_pipelined(
      6, [&](std::size_t k) { log.add('a', k); },
      [&](std::size_t k) {
    if (std::this_thread::get_id() == caller) second_on_caller = true;
    log.add('b', k);
      },
      [&](std::size_t k) { log.add('c', k); });
  ASSERT_EQ(log.events.size(), 18u);
  EXPECT_FALSE(second_on_caller) << "the link stage runs on its own thread";
  for (std::size_t k = 0; k < 6; ++k) {
    EXPECT_LT(log.at("a" + std::to_string(k)), log.at("b" + std::to_string(k)));
    EXPECT_LT(log.at("b" + std::to_string(k)), log.at("c" + std::to_string(k)));
    if (k > 0) {
      for (char s : {'a', 'b', 'c'}) {
        EXPECT_LT(log.at(s + std::to_string(k - 1)), log.at(s + std::to_string(k))) << s << k;
      }
    }
  }
}

TEST(Pipeline, TheLinkCarriesAChunkWhileTheCallerWorksOnTheNext) {
  // first(1) returns only once second(0) has started: a pipeline that ran the stages one after
  // the other would never get there (the wait gives up after 10 s and the test fails).
  std::atomic<bool> second_started{false};
  bool overlapped = false;
  run_pipelined(
      2,
      [&](std::size_t k) {
    if (k != 1) return;
    for (int i = 0; i < 1000 && !second_started; ++i) std::this_thread::sleep_for(10ms);
    overlapped = second_started;
      },
      [&](std::size_t k) {
    if (k == 0) second_started = true;
  },
      [](std::size_t) {});
  EXPECT_TRUE(overlapped);
}

TEST(Pipeline, AWindowBoundsTheChunksInFlightAndFixesTheCallersOrder) {
  // Two slots: the link never fills a slot the host has not emptied (b(k) after c(k - 2)), the
  // host never refills one the link still reads (a(k) after b(k - 2)), and the calling thread's
  // order is the same on every run (c(k - 2) before a(k)), whatever the timing.
  for (int run = 0; run < 20; ++run) {
    Log log;
    const std::size_t n = 7, window = 2;
    run_pipelined(
        n, [&](std::size_t k) { log.add('a', k); },
        [&](std::size_t k) {
      if (run % 2) std::this_thread::sleep_for(1ms);
      log.add('b', k);
        },
        [&](std::size_t k) { log.add('c', k); }, window);
    ASSERT_EQ(log.events.size(), 3 * n);
    std::vector<std::string> caller;
    for (const auto& e : log.events) {
      if (e[0] != 'b') caller.push_back(e);
    }
    EXPECT_EQ(caller, (std::vector<std::string>{"a0", "a1", "c0", "a2", "c1", "a3", "c2", "a4", "c3", "a5", "c4", "a6",
                                                "c5", "c6"}));
    for (std::size_t k = 0; k < n; ++k) {
      const std::string i = std::to_string(k);
      EXPECT_LT(log.at("a" + i), log.at("b" + i));
      EXPECT_LT(log.at("b" + i), log.at("c" + i));
      if (k >= window) {
        const std::string back = std::to_string(k - window);
        EXPECT_LT(log.at("c" + back), log.at("b" + i)) << "the link filled a slot the host had not emptied";
        EXPECT_LT(log.at("b" + back), log.at("a" + i)) << "the host refilled a slot the link still read";
      }
    }
  }
}

TEST(Pipeline, AWindowStillLetsTheLinkCarryAChunkWhileTheCallerGathersTheLast) {
  // third(0) returns only once second(1) has started.
  std::atomic<bool> second_started{false};
  bool overlapped = false;
  run_pipelined(
      3, [](std::size_t) {},
      [&](std::size_t k) {
    if (k == 1) second_started = true;
      },
      [&](std::size_t k) {
    if (k != 0) return;
    for (int i = 0; i < 1000 && !second_started; ++i) std::this_thread::sleep_for(10ms);
    overlapped = second_started;
  },
      2);
  EXPECT_TRUE(overlapped);
}

TEST(Pipeline, OneChunkOrNoneRunsOnTheCallingThread) {
  const auto caller = std::this_thread::get_id();
  int calls = 0;
  const auto here = [&](std::size_t) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ++calls;
  };
  run_pipelined(0, here, here, here);
  EXPECT_EQ(calls, 0);
  run_pipelined(1, here, here, here);
  EXPECT_EQ(calls, 3);
}

TEST(Pipeline, ALinkFailureIsRethrownOnTheCallerAndStopsThePipeline) {
  Log log;
  try {
    run_pipelined(
        5, [&](std::size_t k) { log.add('a', k); },
        [&](std::size_t k) {
      if (k == 2) throw std::runtime_error("link broke at chunk 2");
      log.add('b', k);
        },
        [&](std::size_t k) { log.add('c', k); });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "link broke at chunk 2");
  }
  EXPECT_EQ(log.at("b3"), log.events.size()) << "the link went on after failing";
  EXPECT_EQ(log.at("c2"), log.events.size()) << "chunk 2 was gathered without its link stage";
  EXPECT_LT(log.at("c1"), log.events.size()) << "chunks before the failure finish";
}

TEST(Pipeline, ACallerFailureWaitsForTheLinksCurrentChunkAndStartsNoOther) {
  Log log;
  std::atomic<bool> in_second{false};
  try {
    run_pipelined(
        4,
        [&](std::size_t k) {
      log.add('a', k);
      if (k == 1) {
        for (int i = 0; i < 1000 && !in_second; ++i) std::this_thread::sleep_for(1ms);
        throw std::runtime_error("host failed at chunk 1");
      }
        },
        [&](std::size_t k) {
      in_second = true;
      std::this_thread::sleep_for(50ms);  // still running when the caller fails
      log.add('b', k);
    },
        [&](std::size_t k) { log.add('c', k); });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "host failed at chunk 1");
  }
  // The helper finished chunk 0 before run_pipelined returned, and never started chunk 1.
  EXPECT_LT(log.at("b0"), log.events.size());
  EXPECT_EQ(log.at("b1"), log.events.size());
  EXPECT_EQ(log.at("c0"), log.events.size());
}

TEST(Pipeline, AGatherFailureIsRethrownAfterTheLinkIsDone) {
  std::atomic<int> seconds{0};
  EXPECT_THROW(run_pipelined(
                   3, [](std::size_t) {},
                   [&](std::size_t) {
    std::this_thread::sleep_for(5ms);
    ++seconds;
                   },
                   [](std::size_t k) {
    if (k == 0) throw std::runtime_error("gather failed");
  }),
      std::runtime_error);
  const int after = seconds;
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(seconds.load(), after) << "the link stage still ran after run_pipelined returned";
}

TEST(Chunks, CoverTheBufferInEqualWholeElementsNeverMoreThanItsElements) {
  EXPECT_EQ(chunk_count(0, 4, 4096), 0u);
  EXPECT_EQ(chunk_count(1000, 4, 0), 1u);
  EXPECT_EQ(chunk_count(1024, 4, 4096), 1u);
  EXPECT_EQ(chunk_count(1025, 4, 4096), 2u);
  EXPECT_EQ(chunk_count(3, 8, 1), 3u) << "never more chunks than elements";
  EXPECT_EQ(chunk_count(4u << 20, 4, 2u << 20), 8u);
  for (std::size_t count : {1u, 7u, 1000u, 4099u}) {
    for (std::size_t chunks = 1; chunks <= std::min<std::size_t>(count, 9); ++chunks) {
      std::size_t at = 0, smallest = count, largest = 0;
      for (std::size_t k = 0; k < chunks; ++k) {
        const auto r = chunk_range(count, chunks, k);
        EXPECT_EQ(r.begin, at) << count << " in " << chunks;
        smallest = std::min(smallest, r.end - r.begin);
        largest = std::max(largest, r.end - r.begin);
        at = r.end;
      }
      EXPECT_EQ(at, count);
      EXPECT_LE(largest - smallest, 1u);
      EXPECT_GT(smallest, 0u);
    }
  }
}

TEST(Thresholds, RoundTripAndTextThatIsNotFourSizesIsAMismatch) {
  const Hierarchy::Thresholds t{1u << 20, 8u << 20, 0, static_cast<std::size_t>(INT64_MAX)};
  const auto back = decode_thresholds(encode_thresholds(t));
  EXPECT_EQ(back.stripe_bytes, t.stripe_bytes);
  EXPECT_EQ(back.chunk_bytes, t.chunk_bytes);
  EXPECT_EQ(back.gather_chunk_bytes, t.gather_chunk_bytes);
  EXPECT_EQ(back.gather_stripe_bytes, t.gather_stripe_bytes);
  EXPECT_EQ(decode_thresholds("5 6 7 8").gather_chunk_bytes, 7u);
  for (const char* bad : {"", "1048576", "1048576 x", "-1 5", "1048576 -5", "1048576 5", "1 2 3", "1 2 3 4 5",
                          "1 2 3 4 ", "1 2 3 x", "1  2 3 4"}) {
    try {
      decode_thresholds(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("same ddp build"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ddp::detail
