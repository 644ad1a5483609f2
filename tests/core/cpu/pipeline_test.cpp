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
  run_pipelined(6, [&](std::size_t k) { log.add('a', k); },
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
  run_pipelined(2,
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
    run_pipelined(5, [&](std::size_t k) { log.add('a', k); },
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
    run_pipelined(4,
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
  EXPECT_THROW(run_pipelined(3, [](std::size_t) {}, [&](std::size_t) {
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

TEST(Thresholds, RoundTripAndTextThatIsNotTwoSizesIsAMismatch) {
  const Hierarchy::Thresholds t{1u << 20, 2u << 20};
  const auto back = decode_thresholds(encode_thresholds(t));
  EXPECT_EQ(back.stripe_bytes, t.stripe_bytes);
  EXPECT_EQ(back.chunk_bytes, t.chunk_bytes);
  for (const char* bad : {"", "1048576", "1048576 x", "-1 5", "1048576 -5"}) {
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
