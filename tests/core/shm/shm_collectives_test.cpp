// The collective suite through shared memory: world sizes 1 to 5 with the default tuning, with
// tiny chunks (every op takes many pipelined rounds, odd sizes straddle the chunks), with waits
// that sleep at once (the futex path), and hierarchically across simulated hosts. The same suite
// on plain gloo (DDP_SHM=0) keeps that path tested now that shared memory is the default.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../group/collective_suite.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "shm_support.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// Every rank maps exactly `segments` shared-memory segments.
void expect_segments(std::size_t segments) {
  const auto lines = test::shm_mappings();
  EXPECT_EQ(lines.size(), segments) << "mappings of ddp-shm in /proc/self/maps";
}

class ShmWorld : public ::testing::TestWithParam<int> {};

TEST_P(ShmWorld, EveryOpTypeAndSizeMatchesTheReference) {
  test::run_ranks(
      GetParam(),
      [](int, int world) {
    init_process_group("gloo", {.timeout = 60s});
    expect_segments(world > 1 ? 1 : 0);
    test::run_collective_suite(*get_default_group(), {.sizes = {0, 1, 13, 1009, 40000}});
    destroy_process_group();
    expect_segments(0);
      },
      {.deadline = 170s});
}

TEST_P(ShmWorld, ManySmallChunksWithOddSizesMatchTheReference) {
  test::run_ranks(
      GetParam(),
      [](int, int world) {
    init_process_group("gloo", {.timeout = 60s});
    expect_segments(world > 1 ? 1 : 0);
    test::run_collective_suite(*get_default_group(), {.sizes = {3, 1025, 4099, 30011}, .large_bytes = 1 << 20});
    destroy_process_group();
      },
      {.deadline = 170s, .env = {{"DDP_SHM_CHUNK_BYTES", "4096"}, {"DDP_SHM_SMALL_BYTES", "0"}}});
}

TEST_P(ShmWorld, WaitsThatSleepAtOnceStillMatch) {
  test::run_ranks(
      GetParam(),
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    test::run_collective_suite(*get_default_group(), {.sizes = {1, 5000}, .large_bytes = 0});
    test::run_async_burst(*get_default_group(), 300);
    destroy_process_group();
      },
      {.deadline = 170s, .env = {{"DDP_SHM_SPIN_US", "0"}, {"DDP_SHM_CHUNK_BYTES", "8192"}}});
}

TEST_P(ShmWorld, AThousandBackToBackAsyncOps) {
  test::run_ranks(GetParam(), [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    test::run_async_burst(*get_default_group(), 1000);
    destroy_process_group();
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmWorld, ::testing::Values(1, 2, 3, 4, 5),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// The mappings of shared memory of allocate_shared_memory (this rank's and its peers') in
// /proc/self/maps.
std::size_t shared_memory_mappings() { return test::shm_mappings("ddp-shared").size(); }

// Buffers in shared memory skip the slots: every op and size with all ranks' buffers shared, then
// with every other rank's only (an op meets both kinds), in chunks of 4 KB and without the
// one-step path, so that every reduction takes many rounds of the large path.
class ShmSharedBuffers : public ::testing::TestWithParam<int> {};

TEST_P(ShmSharedBuffers, EveryOpMatchesTheReferenceWhenAllOrSomeRanksShare) {
  test::run_ranks(
      GetParam(),
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 60s});
    auto& group = *get_default_group();
    test::SharedHostMemory all(group);
    test::run_collective_suite(group, {.sizes = {1, 1025, 30011}, .large_bytes = 1 << 20, .memory = &all});
    EXPECT_GT(all.allocated(), 0u);
    test::SharedHostMemory some(group);
    test::run_collective_suite(group, {.sizes = {1025, 30011}, .large_bytes = 0, .memory = rank % 2 ? nullptr : &some});
    test::run_async_burst(group, 100);
    destroy_process_group();
      },
      {.deadline = 170s, .env = {{"DDP_SHM_CHUNK_BYTES", "4096"}, {"DDP_SHM_SMALL_BYTES", "0"}}});
}

TEST_P(ShmSharedBuffers, PeersReadTheBufferWhereItIsAndItOutlivesTheGroup) {
  test::run_ranks(
      GetParam(),
      [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    const std::size_t n = 1 << 20;
    auto memory = group->allocate_shared_memory(n * sizeof(float));
    ASSERT_TRUE(memory);
    auto* data = static_cast<float*>(memory.get());
    EXPECT_EQ(std::count(data, data + n, 0.0f), static_cast<std::ptrdiff_t>(n)) << "zeroed";
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(rank + i % 7);
    EXPECT_EQ(shared_memory_mappings(), 1u);
    group->all_reduce(buffer_of(data, n))->wait();
    // The peers mapped this rank's buffer, and this rank theirs: they were read where they are.
    EXPECT_EQ(shared_memory_mappings(), static_cast<std::size_t>(world));
    const float ranks = static_cast<float>(world * (world - 1) / 2);
    for (std::size_t i = 0; i < n; i += 4093) ASSERT_EQ(data[i], ranks + world * static_cast<float>(i % 7)) << i;
    // A second buffer, then the first one freed: its entry is reused and the peers map the new one.
    auto second = group->allocate_shared_memory(4096 * sizeof(float));
    memory.reset();
    auto third = group->allocate_shared_memory(n * sizeof(float));
    auto* t = static_cast<float*>(third.get());
    std::fill(t, t + n, 1.0f);
    group->all_reduce(buffer_of(t, n))->wait();
    EXPECT_EQ(t[n - 1], static_cast<float>(world));
    // Freed memory does not live on in the peers: the next large op drops their mappings of it.
    const std::size_t before = shared_memory_mappings();
    {
      auto fourth = group->allocate_shared_memory(n * sizeof(float));
      group->all_reduce(buffer_of(static_cast<float*>(fourth.get()), n))->wait();
      EXPECT_EQ(shared_memory_mappings(), before + static_cast<std::size_t>(world)) << "its own and the peers'";
    }
    std::vector<float> plain(n, 1.0f);
    group->all_reduce(buffer_of(plain.data(), n))->wait();
    EXPECT_EQ(shared_memory_mappings(), before) << "the peers still map memory freed since";
    group.reset();
    destroy_process_group();
    // The peers' memory is unmapped with the group; this rank's stays usable as ordinary memory.
    EXPECT_EQ(shared_memory_mappings(), 2u);
    t[0] = 5;
    EXPECT_EQ(t[0], 5.0f);
    second.reset();
    third.reset();
    EXPECT_EQ(shared_memory_mappings(), 0u);
      },
      {.deadline = 120s});
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmSharedBuffers, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(ShmSharedBuffers, NoneWithoutPeersOnTheHostAndZeroBytesIsRefused) {
  test::run_ranks(
      2,
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    EXPECT_FALSE(get_default_group()->allocate_shared_memory(64)) << "DDP_SHM=0: plain gloo shares no memory";
    test::expect_error<InvalidArgument>([] { get_default_group()->allocate_shared_memory(0); }, {"the size is 0"});
    destroy_process_group();
      },
      {.env = {{"DDP_SHM", "0"}}});
  test::run_ranks(
      2,
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    EXPECT_FALSE(get_default_group()->allocate_shared_memory(64)) << "each rank alone on its host";
    destroy_process_group();
      },
      {.rank_env = [](int rank) {
        return std::map<std::string, std::string>{{"DDP_SHM_HOST_ID", rank ? "b" : "a"}};
      }});
}

TEST(ShmSharedBuffers, ARankThePeersCannotOpenGetsNoneAndItsOpsStillWork) {
  // A process that is not dumpable has a /proc/<pid>/fd that its peers may not open.
  test::run_ranks(2, [](int rank, int) {
    init_process_group("gloo", {.timeout = 60s});
    auto group = get_default_group();
    if (rank == 1) {
      ASSERT_EQ(::prctl(PR_SET_DUMPABLE, 0), 0);
    }
    const std::size_t n = 1 << 20;
    auto memory = group->allocate_shared_memory(n * sizeof(float));
    EXPECT_EQ(static_cast<bool>(memory), rank == 0);
    std::vector<float> ordinary;
    float* data = memory ? static_cast<float*>(memory.get()) : (ordinary.resize(n), ordinary.data());
    std::fill(data, data + n, static_cast<float>(rank + 1));
    group->all_reduce(buffer_of(data, n))->wait();
    EXPECT_EQ(data[0], 3.0f);
    EXPECT_EQ(data[n - 1], 3.0f);
    group.reset();
    destroy_process_group();
  });
}

class PlainGlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(PlainGlooWorld, EveryOpTypeAndSizeMatchesTheReference) {
  test::run_ranks(
      GetParam(),
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    expect_segments(0);
    test::run_collective_suite(*get_default_group());
    test::run_async_burst(*get_default_group(), 300);
    destroy_process_group();
      },
      {.deadline = 170s, .env = {{"DDP_SHM", "0"}}});
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, PlainGlooWorld, ::testing::Values(2, 3, 5),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(ShmSetup, OneRankWithDdpShmOffMakesTheWholeGroupUseGloo) {
  test::run_ranks(
      3,
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    expect_segments(0);
    test::run_collective_suite(*get_default_group(), {.sizes = {7}, .large_bytes = 0});
    destroy_process_group();
      },
      {.rank_env = [](int rank) {
        return std::map<std::string, std::string>{{"DDP_SHM", rank == 1 ? "0" : "1"}};
      }});
}

TEST(ShmSetup, RanksWithDifferentTuningFollowTheirHostsFirstRank) {
  // Chunk and small-message threshold decide how many steps an op takes: rank 0's hold for all.
  test::run_ranks(
      3,
      [](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    expect_segments(1);
    test::run_collective_suite(*get_default_group(), {.sizes = {1, 5000, 30011}, .large_bytes = 0});
    destroy_process_group();
      },
      {.deadline = 170s, .rank_env = [](int rank) {
         if (rank == 0)
           return std::map<std::string, std::string>{{"DDP_SHM_CHUNK_BYTES", "4096"}, {"DDP_SHM_SMALL_BYTES", "0"}};
         if (rank == 1) return std::map<std::string, std::string>{};
         return std::map<std::string, std::string>{{"DDP_SHM_CHUNK_BYTES", "65536"}, {"DDP_SHM_SMALL_BYTES", "200000"}};
       }});
}

// Simulated hosts: DDP_SHM_HOST_ID puts ranks on different "hosts", so the collectives take the
// hierarchical paths (cpu/hierarchy.h): shared memory within each host, gloo between them.
struct HostsCase {
  const char* name;
  std::vector<std::string> hosts;  // per rank
  std::map<std::string, std::string> env = {};
  std::size_t large_bytes = 4 << 20;  // smaller with tiny chunks: a gather's 4 MB would be 4096 of them
  bool shared = false;                // the buffers in shared memory (allocate_shared_memory)
};

void PrintTo(const HostsCase& c, std::ostream* os) { *os << c.name; }

class ShmHierarchy : public ::testing::TestWithParam<HostsCase> {};

TEST_P(ShmHierarchy, EveryOpAndTypeAcrossHostsMatchesTheReference) {
  const HostsCase& c = GetParam();
  test::run_ranks(
      static_cast<int>(c.hosts.size()),
      [&](int, int) {
    init_process_group("gloo", {.timeout = 60s});
    expect_segments(std::atoi(std::getenv("RANKS_ON_MY_HOST")) > 1 ? 1 : 0);
    test::SharedHostMemory shared(*get_default_group());
    test::run_collective_suite(
        *get_default_group(),
        {.sizes = {0, 1, 13, 9000}, .large_bytes = c.large_bytes, .memory = c.shared ? &shared : nullptr});
    test::run_async_burst(*get_default_group(), 200);
    destroy_process_group();
      },
      {.deadline = 170s, .rank_env = [&](int rank) {
         int same = 0;
         for (const auto& h : c.hosts) same += h == c.hosts[static_cast<std::size_t>(rank)];
         auto env = c.env;
         env["DDP_SHM_HOST_ID"] = c.hosts[static_cast<std::size_t>(rank)];
         env["RANKS_ON_MY_HOST"] = std::to_string(same);
         return env;
       }});
}

// Every op and type through the pipeline: striped from 0 bytes up, chunks of 4 KB (odd counts
// straddle them, many chunks in flight), on both shapes.
const std::map<std::string, std::string> kTinyChunks = {{"DDP_SHM_STRIPE_BYTES", "0"},
                                                        {"DDP_SHM_STRIPE_CHUNK_BYTES", "4096"},
                                                        {"DDP_SHM_GATHER_CHUNK_BYTES", "4096"},
                                                        {"DDP_SHM_GATHER_STRIPE_BYTES", "0"}};
// The gathers striped at every size (by default they go through the hosts' first ranks).
const std::map<std::string, std::string> kStripedGathers = {{"DDP_SHM_GATHER_STRIPE_BYTES", "0"}};

INSTANTIATE_TEST_SUITE_P(
    Placements, ShmHierarchy,
    ::testing::Values(
        HostsCase{"hosts2x2interleaved", {"a", "b", "a", "b"}, kStripedGathers},  // lanes {0, 2} and {1, 3}
        HostsCase{"hosts2x3", {"a", "a", "a", "b", "b", "b"}, kStripedGathers},   // three lanes, odd shares
        HostsCase{"hosts3x2", {"a", "a", "b", "b", "c", "c"}, kStripedGathers},   // rings of three hosts per lane
        HostsCase{"hosts3x2leaders", {"a", "a", "b", "b", "c", "c"}},             // gathers through the first ranks
        HostsCase{"hosts3and2", {"a", "a", "a", "b", "b"}},  // unequal: through the hosts' first ranks
        HostsCase{"hosts2and1", {"a", "a", "b"}},            // a host with a single rank
        HostsCase{"hosts2x2tinyChunks", {"a", "a", "b", "b"}, kTinyChunks, 512 << 10},
        HostsCase{"hosts2and3tinyChunks", {"a", "b", "a", "b", "b"}, kTinyChunks, 512 << 10},
        HostsCase{"hosts2x2sharedBuffers", {"a", "a", "b", "b"}, kTinyChunks, 512 << 10, true},
        HostsCase{"hosts3and2sharedBuffers", {"a", "a", "a", "b", "b"}, {}, 4 << 20, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ShmHierarchy, RankZerosThresholdsHoldForEveryRank) {
  // Ranks 1 and 2 would stripe everything in 4 KiB chunks (gathers too), the others only from
  // 1 MiB in the default chunks: rank 0's values must hold, or a 64 KiB all_reduce would take two
  // paths (or a 2 MiB one two chunkings) and hang until the timeout.
  test::run_ranks(
      4,
      [](int, int) {
    init_process_group("gloo", {.timeout = 20s});
    test::run_collective_suite(*get_default_group(), {.sizes = {1, 9000, 16384}, .large_bytes = 2 << 20});
    destroy_process_group();
      },
      {.deadline = 120s, .rank_env = [](int rank) {
         std::map<std::string, std::string> env{{"DDP_SHM_HOST_ID", rank % 2 ? "b" : "a"}};
         if (rank == 1 || rank == 2) {
           env["DDP_SHM_STRIPE_BYTES"] = "0";
           env["DDP_SHM_STRIPE_CHUNK_BYTES"] = "4096";
           env["DDP_SHM_GATHER_CHUNK_BYTES"] = "4096";
           env["DDP_SHM_GATHER_STRIPE_BYTES"] = "0";
         }
         return env;
       }});
}

TEST(ShmGroups, SeveralGroupsKeepSeparateSegmentsAndRunAtOnce) {
  test::run_ranks(4, [](int rank, int) {
    init_process_group("gloo", {.timeout = 60s});
    auto all = new_group({0, 1, 2, 3});
    auto low = new_group({0, 1});  // every rank calls new_group for every group, in the same order
    auto high = new_group({2, 3});
    ASSERT_TRUE(all);
    EXPECT_EQ(static_cast<bool>(low), rank < 2);
    EXPECT_EQ(static_cast<bool>(high), rank >= 2);
    auto pair = low ? low : high;
    expect_segments(3);  // the world, `all` and this rank's pair
    std::thread a([&] { test::run_async_burst(*get_default_group(), 300); });
    std::thread b([&] { test::run_async_burst(*all, 300); });
    std::thread c([&] { test::run_collective_suite(*pair, {.sizes = {5, 3000}, .large_bytes = 0}); });
    a.join();
    b.join();
    c.join();
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp
