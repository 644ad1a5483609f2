// Passes from a position of the epoch (distributed_pass_indices, pure): an epoch interrupted at
// one world size and continued at another sees every sample once, apart from the padding its
// docs spell out; at the same world size the continued pass is the rest of PyTorch's sequence; and
// even_shards = false gives each rank exactly its share.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "ddp/torch/distributed_sampler.h"

namespace ddp {
namespace {

constexpr std::uint64_t kSeed = 7;
constexpr std::int64_t kEpoch = 3;

struct Mode {
  bool drop_last;
  bool even_shards;
  const char* name;
};
const Mode kModes[] = {{false, true, "padded"}, {true, true, "drop_last"}, {false, false, "even_shards=false"}};

// Where a pass ends, in positions of the epoch's sequence: what docs/DATA.md says about padding.
std::int64_t pass_end(std::int64_t n, int replicas, std::int64_t start, const Mode& mode) {
  const std::int64_t rest = n - start;
  if (!mode.even_shards) return n;                                // no padding, nothing dropped
  if (mode.drop_last) return start + rest / replicas * replicas;  // the last rest % R are not seen
  return start + (rest + replicas - 1) / replicas * replicas;     // padded past n
}

// Position -> index, from every rank's pass: each position must come from exactly one rank.
void take_pass(std::map<std::int64_t, std::int64_t>& seen, std::int64_t n, int replicas, std::int64_t start,
               const Mode& mode, std::int64_t per_rank_limit, const std::string& context) {
  for (int rank = 0; rank < replicas; ++rank) {
    const auto indices =
        distributed_pass_indices(n, replicas, rank, kSeed, kEpoch, start, true, mode.drop_last, mode.even_shards);
    ASSERT_EQ(static_cast<std::int64_t>(indices.size()),
              distributed_pass_size(n, replicas, rank, start, mode.drop_last, mode.even_shards))
        << context;
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(indices.size()) && j < per_rank_limit; ++j) {
      const std::int64_t position = start + rank + j * replicas;
      ASSERT_TRUE(seen.emplace(position, indices[static_cast<std::size_t>(j)]).second)
          << context << ": position " << position << " read twice";
    }
  }
}

TEST(DistributedSamplerPasses, AWorldSizeChangeLosesAndRepeatsNoSample) {
  // Every old world size to every new one up to 8, at every count the old ranks may have
  // consumed, for datasets that divide and do not divide: the positions read are exactly
  // [0, end) once each, position k holding perm[k % n], and so each sample once but the padding.
  for (const std::int64_t n : {0, 1, 5, 23, 24}) {
    const auto perm = torch_randperm(n, kSeed + kEpoch);
    for (const Mode& mode : kModes) {
      for (int old_world = 1; old_world <= 8; ++old_world) {
        const std::int64_t most = distributed_pass_size(n, old_world, 0, 0, mode.drop_last, mode.even_shards);
        for (std::int64_t consumed = 0; consumed <= most; ++consumed) {
          for (int new_world = 1; new_world <= 8; ++new_world) {
            const std::string context = std::string(mode.name) + " n=" + std::to_string(n) + " world " +
                                        std::to_string(old_world) + " -> " + std::to_string(new_world) + " after " +
                                        std::to_string(consumed) + " each";
            // The old ranks read `consumed` indices each (rank 0's state says how far the job got).
            std::map<std::int64_t, std::int64_t> seen;
            take_pass(seen, n, old_world, 0, mode, consumed, context);
            const DistributedSamplerState state{
                .epoch = kEpoch, .seed = kSeed, .consumed = consumed, .dataset_size = n, .num_replicas = old_world};
            const std::int64_t start = state.samples_consumed();
            take_pass(seen, n, new_world, start, mode, INT64_MAX, context);
            // Reading past n happens only as padding at the end: the last pass's, or the old
            // pass's when it had already reached the end.
            const std::int64_t end =
                start == n && !seen.empty() ? seen.rbegin()->first + 1 : pass_end(n, new_world, start, mode);
            ASSERT_EQ(static_cast<std::int64_t>(seen.size()), end) << context;
            std::map<std::int64_t, int> times;
            for (const auto& [position, index] : seen) {
              ASSERT_LT(position, end) << context;
              ASSERT_EQ(index, perm[static_cast<std::size_t>(position % n)]) << context << " at " << position;
              if (position < n) ++times[index];
            }
            if (!mode.drop_last) {
              ASSERT_EQ(static_cast<std::int64_t>(times.size()), n) << context << ": a sample was lost";
            }
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerPasses, AtTheSameWorldSizeTheRestIsPyTorchsSequence) {
  for (const bool drop_last : {false, true}) {
    for (int world = 1; world <= 5; ++world) {
      for (int rank = 0; rank < world; ++rank) {
        const auto full = distributed_indices(37, world, rank, kSeed, kEpoch, true, drop_last);
        for (std::int64_t consumed = 0; consumed <= static_cast<std::int64_t>(full.size()); ++consumed) {
          const DistributedSamplerState state{
              .epoch = kEpoch, .seed = kSeed, .consumed = consumed, .dataset_size = 37, .num_replicas = world};
          const auto rest =
              distributed_pass_indices(37, world, rank, kSeed, kEpoch, state.samples_consumed(), true, drop_last);
          ASSERT_EQ(rest, std::vector<std::int64_t>(full.begin() + consumed, full.end()))
              << "world " << world << " rank " << rank << " after " << consumed;
        }
      }
    }
  }
}

TEST(DistributedSamplerPasses, WithoutEvenShardsEachRankGetsExactlyItsShare) {
  for (const std::int64_t n : {0, 1, 7, 64, 1001}) {
    for (int world = 1; world <= 9; ++world) {
      std::vector<int> times(static_cast<std::size_t>(n), 0);
      std::int64_t fewest = INT64_MAX, most = 0;
      for (int rank = 0; rank < world; ++rank) {
        const auto indices = distributed_pass_indices(n, world, rank, kSeed, kEpoch, 0, true, false, false);
        EXPECT_EQ(static_cast<std::int64_t>(indices.size()),
                  (n - rank + world - 1) / world > 0 ? (n - rank + world - 1) / world : 0);
        fewest = std::min<std::int64_t>(fewest, static_cast<std::int64_t>(indices.size()));
        most = std::max<std::int64_t>(most, static_cast<std::int64_t>(indices.size()));
        // The first ones are PyTorch's: the same positions, without the padding.
        const auto padded = distributed_indices(n, world, rank, kSeed, kEpoch);
        EXPECT_EQ(indices, std::vector<std::int64_t>(padded.begin(),
                                                     padded.begin() + static_cast<std::ptrdiff_t>(indices.size())));
        for (auto i : indices) ++times[static_cast<std::size_t>(i)];
      }
      for (std::int64_t i = 0; i < n; ++i)
        EXPECT_EQ(times[static_cast<std::size_t>(i)], 1) << "n=" << n << " world " << world;
      EXPECT_LE(most - fewest, 1) << "n=" << n << " world " << world;
    }
  }
}

std::string invalid_argument_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(DistributedSamplerPasses, BadArgumentsSayWhatIsWrong) {
  EXPECT_EQ(invalid_argument_of([] { distributed_pass_indices(10, 2, 0, 0, 0, 11); }),
            "distributed_indices: start 11 is outside [0, 10]: it counts the samples of the epoch consumed before the "
            "pass");
  EXPECT_EQ(invalid_argument_of([] { distributed_pass_size(10, 2, 0, -1); }),
            "distributed_pass_size: start -1 is outside [0, 10]: it counts the samples of the epoch consumed before "
            "the pass");
  EXPECT_EQ(invalid_argument_of([] { distributed_pass_size(10, 2, 0, 0, true, false); }),
            "distributed_pass_size: drop_last trims the shards to one length, and even_shards = false gives each "
            "rank exactly its share: choose one");
  EXPECT_EQ(invalid_argument_of([] { distributed_pass_size(10, 2, 2, 0); }),
            "distributed_pass_size: rank 2 is not less than num_replicas 2: a rank must be in [0, 1]; pass the "
            "process's rank and the world size");
}

}  // namespace
}  // namespace ddp
