// distributed_indices and torch_randperm against PyTorch: golden vectors written by
// make_golden.py (/usr/bin/python3, PyTorch 1.13), a live comparison on random cases against every
// reference PyTorch (support/reference_pythons.h: Debian's 1.13, PyPI's 2.x), LibTorch's own
// at::randperm, and properties that hold for any correct sampler.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "ddp/torch/distributed_sampler.h"
#include "sampler/randperm.h"
#include "support/multiprocess.h"
#include "support/reference_pythons.h"

namespace ddp {
namespace {

constexpr std::size_t kHead = 24;  // as make_golden.py's HEAD

std::string source_path(const std::string& relative) { return std::string(DDP_SOURCE_DIR) + "/" + relative; }

// make_golden.py's summary(): "len hash first..." with an FNV-1a-style digest of every value.
std::string summary(const std::vector<std::int64_t>& values) {
  std::uint64_t h = 14695981039346656037ULL;
  for (std::int64_t x : values) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ULL;
  std::ostringstream out;
  out << values.size() << " " << h;
  for (std::size_t i = 0; i < values.size() && i < kHead; ++i) out << " " << values[i];
  return out.str();
}

struct Case {
  std::int64_t n = 0;
  int replicas = 1, rank = 0;
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  bool shuffle = true, drop_last = false;
};

std::string case_text(const Case& c) {
  std::ostringstream out;
  out << c.n << " " << c.replicas << " " << c.rank << " " << c.seed << " " << c.epoch << " " << c.shuffle << " "
      << c.drop_last;
  return out.str();
}

// A sampler line as make_golden.py writes it, computed here; RandpermCompat does not matter
// below kRandpermLargeSize.
std::string our_line(const Case& c) {
  return case_text(c) + " : " +
         summary(distributed_indices(c.n, c.replicas, c.rank, c.seed, c.epoch, c.shuffle, c.drop_last));
}

Case parse_case(const std::string& text) {
  std::istringstream in(text);
  Case c;
  int shuffle = 0, drop_last = 0;
  in >> c.n >> c.replicas >> c.rank >> c.seed >> c.epoch >> shuffle >> drop_last;
  c.shuffle = shuffle != 0;
  c.drop_last = drop_last != 0;
  return c;
}

std::vector<std::string> golden_lines(const std::string& file) {
  std::ifstream in(source_path("tests/torch/sampler/golden/" + file));
  EXPECT_TRUE(in.good()) << "missing golden file " << file
                         << ": run /usr/bin/python3 tests/torch/sampler/make_golden.py";
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

TEST(DistributedSamplerGolden, EveryCaseMatchesPyTorch) {
  const auto lines = golden_lines("distributed_sampler.txt");
  ASSERT_GT(lines.size(), 3000u);
  int mismatches = 0;
  for (const std::string& line : lines) {
    const Case c = parse_case(line.substr(0, line.find(" : ")));
    const std::string ours = our_line(c);
    if (ours != line && ++mismatches <= 5) ADD_FAILURE() << "PyTorch: " << line << "\nddp:     " << ours;
  }
  EXPECT_EQ(mismatches, 0) << "of " << lines.size() << " golden cases";
}

TEST(DistributedSamplerGolden, Random64StreamMatchesTorchGenerator) {
  int checked = 0;
  for (const std::string& line : golden_lines("randperm.txt")) {
    if (line.rfind("random64 ", 0) != 0) continue;
    std::istringstream in(line.substr(9));
    std::uint64_t seed = 0;
    std::string colon;
    in >> seed >> colon;
    at::CPUGeneratorImpl generator(seed);
    for (std::uint64_t expected; in >> expected;) {
      EXPECT_EQ(generator.random64(), expected) << line;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 40);
}

// PyTorch 2.7's loop for large n, written from its source in make_golden.py and run there on
// torch's own draws, against ours at small n (where torch_randperm would not pick it).
TEST(DistributedSamplerGolden, InsideOutLoopMatchesPythonReference) {
  int checked = 0;
  for (const std::string& line : golden_lines("randperm.txt")) {
    if (line.rfind("inside_out64 ", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    std::int64_t n = 0;
    std::uint64_t seed = 0;
    in >> n >> seed;
    std::ostringstream ours;
    ours << "inside_out64 " << n << " " << seed << " : " << summary(detail::randperm_inside_out64(n, seed));
    EXPECT_EQ(ours.str(), line);
    ++checked;
  }
  EXPECT_EQ(checked, 32);
}

// LibTorch's at::randperm (the kernel Python's torch.randperm runs) against ours, in process.
TEST(DistributedSamplerRandperm, MatchesLibTorchRandperm) {
  for (std::int64_t n : {0, 1, 2, 3, 17, 1000, 65536, 300001}) {
    for (std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{5}, (std::uint64_t{1} << 32) + 5, ~std::uint64_t{0}}) {
      at::Tensor expected = at::randperm(n, at::make_generator<at::CPUGeneratorImpl>(seed), at::kLong);
      const std::vector<std::int64_t> ours = torch_randperm(n, seed);
      ASSERT_EQ(static_cast<std::int64_t>(ours.size()), n);
      const std::int64_t* want = expected.data_ptr<std::int64_t>();
      EXPECT_TRUE(std::equal(ours.begin(), ours.end(), want)) << "n " << n << " seed " << seed;
    }
  }
}

TEST(DistributedSamplerRandperm, RejectsNegativeN) {
  try {
    torch_randperm(-1, 0);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "torch_randperm: n must be non-negative, got -1");
  }
}

// Opt-in (DDP_TEST_LARGE_RANDPERM=1; a few minutes and 4 GB): the sizes where PyTorch's algorithm
// changes. Vectors are compared and dropped one pair at a time, digests kept.
TEST(DistributedSamplerRandperm, LargeSizesAroundTheAlgorithmSwitch) {
  if (!std::getenv("DDP_TEST_LARGE_RANDPERM")) {
    GTEST_SKIP() << "set DDP_TEST_LARGE_RANDPERM=1 to permute 214,748,364 elements (a few minutes, 4 GB)";
  }
  const std::int64_t n = kRandpermLargeSize;
  const std::uint64_t seed = 3;
  // The linked LibTorch's at::randperm at the switch size: the legacy loop up to 2.6 (Debian's
  // 1.13 here), the inside-out loop from 2.7 on.
  constexpr bool kLinkedIsModern = TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7);
  {
    const at::Tensor expected = at::randperm(n, at::make_generator<at::CPUGeneratorImpl>(seed), at::kLong);
    const std::vector<std::int64_t> ours =
        torch_randperm(n, seed, kLinkedIsModern ? RandpermCompat::kModern : RandpermCompat::kLegacy);
    EXPECT_TRUE(std::equal(ours.begin(), ours.end(), expected.data_ptr<std::int64_t>())) << "LibTorch " TORCH_VERSION;
  }
  const std::string legacy_digest = summary(torch_randperm(n, seed, RandpermCompat::kLegacy));
  std::string modern_digest;
  {  // Modern: the inside-out loop from kRandpermLargeSize on, and a permutation all the same.
    const std::vector<std::int64_t> modern = torch_randperm(n, seed, RandpermCompat::kModern);
    std::vector<bool> seen(static_cast<std::size_t>(n), false);
    for (std::int64_t v : modern) {
      ASSERT_TRUE(v >= 0 && v < n && !seen[static_cast<std::size_t>(v)]) << v;
      seen[static_cast<std::size_t>(v)] = true;
    }
    modern_digest = summary(modern);
  }
  EXPECT_EQ(modern_digest, summary(detail::randperm_inside_out64(n, seed)));
  EXPECT_NE(modern_digest, legacy_digest);
  // One below the switch, both modes give the classic permutation.
  EXPECT_EQ(summary(torch_randperm(n - 1, seed, RandpermCompat::kModern)),
            summary(torch_randperm(n - 1, seed, RandpermCompat::kLegacy)));
}

// Random cases against each reference PyTorch (n stays below kRandpermLargeSize, where 2.7 changed
// randperm: the golden inside_out64 lines cover that loop).
class DistributedSamplerLive : public ::testing::TestWithParam<test::ReferencePython> {};

TEST_P(DistributedSamplerLive, RandomCasesMatchInstalledPyTorch) {
  const std::string python = GetParam().path;
  std::mt19937_64 rng(20240611);
  std::vector<Case> cases;
  for (int i = 0; i < 200; ++i) {
    Case c;
    const int kind = i % 4;
    c.n = kind == 0                  ? static_cast<std::int64_t>(rng() % 40)
          : kind == 3 && i % 20 == 3 ? static_cast<std::int64_t>(100000 + rng() % 200000)
                                     : static_cast<std::int64_t>(rng() % 5000);
    c.replicas = 1 + static_cast<int>(rng() % 12);
    c.rank = static_cast<int>(rng() % static_cast<std::uint64_t>(c.replicas));
    c.seed = rng() >> 1;  // Python raises when seed + epoch reaches 2^64
    c.epoch = static_cast<std::int64_t>(rng() % 1000);
    c.shuffle = rng() % 4 != 0;
    c.drop_last = rng() % 2 == 0;
    cases.push_back(c);
  }
  const auto dir = std::filesystem::temp_directory_path() / ("ddp_sampler_live_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto cases_path = (dir / "cases.txt").string();
  {
    std::ofstream out(cases_path);
    for (const Case& c : cases) out << case_text(c) << "\n";
  }
  const auto result =
      test::run_command({python, source_path("tests/torch/sampler/make_golden.py"), "--cases", cases_path}, {},
                        std::chrono::seconds(120));
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(result.ok()) << result.output;

  std::vector<std::string> answers;
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" : ") != std::string::npos && !line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) {
      answers.push_back(line);
    }
  }
  ASSERT_EQ(answers.size(), cases.size()) << result.output.substr(0, 2000);
  for (std::size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(our_line(cases[i]), answers[i]);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, DistributedSamplerLive, ::testing::ValuesIn(test::reference_pythons()),
                         test::reference_name);

// ---- Properties ------------------------------------------------------------------------------

TEST(DistributedSamplerIndices, ShardsAreDisjointAndCoverTheDatasetWhenDivisible) {
  for (int replicas : {1, 2, 3, 5}) {
    const std::int64_t n = 60 * replicas;
    for (bool drop_last : {false, true}) {
      std::multiset<std::int64_t> all;
      for (int rank = 0; rank < replicas; ++rank) {
        const auto shard = distributed_indices(n, replicas, rank, 11, 4, true, drop_last);
        EXPECT_EQ(static_cast<std::int64_t>(shard.size()), n / replicas);
        all.insert(shard.begin(), shard.end());
      }
      std::multiset<std::int64_t> expected;
      for (std::int64_t i = 0; i < n; ++i) expected.insert(i);
      EXPECT_EQ(all, expected) << "replicas " << replicas;
    }
  }
}

TEST(DistributedSamplerIndices, PaddingRepeatsExactlyTheMissingCount) {
  // 10 over 4 ranks: 3 each, 12 in all, so 2 indices are read twice and none is missing.
  for (auto [n, replicas] : {std::pair<std::int64_t, int>{10, 4}, {3, 8}, {1, 5}, {7, 7}, {101, 10}}) {
    std::map<std::int64_t, int> count;
    std::int64_t total = 0;
    for (int rank = 0; rank < replicas; ++rank) {
      const auto shard = distributed_indices(n, replicas, rank, 0, 0, true, false);
      EXPECT_EQ(static_cast<std::int64_t>(shard.size()), (n + replicas - 1) / replicas);
      for (auto i : shard) ++count[i];
      total += static_cast<std::int64_t>(shard.size());
    }
    const std::int64_t padded = total - n;
    EXPECT_EQ(padded, (replicas - n % replicas) % replicas) << n << " over " << replicas;
    EXPECT_EQ(static_cast<std::int64_t>(count.size()), n);  // every index read at least once
    int extra = 0;
    for (auto [index, times] : count) extra += times - 1;
    EXPECT_EQ(extra, padded);
  }
}

TEST(DistributedSamplerIndices, DropLastTrimsToAMultipleOfReplicas) {
  std::set<std::int64_t> all;
  for (int rank = 0; rank < 4; ++rank) {
    const auto shard = distributed_indices(10, 4, rank, 0, 0, true, true);
    EXPECT_EQ(shard.size(), 2u);
    all.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(all.size(), 8u);  // disjoint, 2 dropped
  EXPECT_TRUE(distributed_indices(3, 8, 5, 0, 0, true, true).empty());
  EXPECT_EQ(distributed_num_samples(3, 8, true), 0);
  EXPECT_EQ(distributed_num_samples(3, 8, false), 1);
}

TEST(DistributedSamplerIndices, DatasetSmallerThanReplicasWrapsRoundRepeatedly) {
  // PyTorch: indices += (indices * ceil(padding / len))[:padding]: position k holds perm[k % n].
  const auto perm = torch_randperm(3, 9);
  for (int rank = 0; rank < 10; ++rank) {
    const auto shard = distributed_indices(3, 10, rank, 9, 0, true, false);
    ASSERT_EQ(shard.size(), 1u);
    EXPECT_EQ(shard[0], perm[rank % 3]);
  }
}

TEST(DistributedSamplerIndices, EmptyDataset) {
  for (bool drop_last : {false, true}) {
    EXPECT_TRUE(distributed_indices(0, 4, 3, 0, 0, true, drop_last).empty());
    EXPECT_EQ(distributed_num_samples(0, 4, drop_last), 0);
  }
}

TEST(DistributedSamplerIndices, EachEpochIsANewOrderAndEpochsRepeat) {
  const auto e0 = distributed_indices(1000, 2, 1, 0, 0);
  const auto e1 = distributed_indices(1000, 2, 1, 0, 1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, distributed_indices(1000, 2, 1, 0, 0));
  // The generator is seeded seed + epoch, as in PyTorch.
  EXPECT_EQ(distributed_indices(1000, 2, 1, 5, 2), distributed_indices(1000, 2, 1, 7, 0));
  // No shuffle: the same order every epoch, 1, 3, 5, ...
  const auto plain = distributed_indices(10, 2, 1, 0, 3, false);
  EXPECT_EQ(plain, (std::vector<std::int64_t>{1, 3, 5, 7, 9}));
}

TEST(DistributedSamplerIndices, BadArgumentsSayWhatIsWrong) {
  auto message = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no InvalidArgument";
  };
  EXPECT_EQ(message([] { distributed_indices(10, 2, 3, 0, 0); }),
            "distributed_indices: rank 3 is not less than num_replicas 2: a rank must be in [0, 1]; pass the "
            "process's rank and the world size");
  EXPECT_EQ(message([] { distributed_indices(10, 2, 2, 0, 0); }),
            "distributed_indices: rank 2 is not less than num_replicas 2: a rank must be in [0, 1]; pass the "
            "process's rank and the world size");
  EXPECT_EQ(message([] { distributed_indices(10, 2, -1, 0, 0); }),
            "distributed_indices: rank must be non-negative, got -1");
  EXPECT_EQ(message([] { distributed_indices(10, 0, 0, 0, 0); }),
            "distributed_indices: num_replicas must be at least 1, got 0: it is the number of processes sharing "
            "the dataset (by default the world size)");
  EXPECT_EQ(message([] { distributed_indices(10, -2, 0, 0, 0); }),
            "distributed_indices: num_replicas must be at least 1, got -2: it is the number of processes sharing "
            "the dataset (by default the world size)");
  EXPECT_EQ(message([] { distributed_indices(-5, 2, 0, 0, 0); }),
            "distributed_indices: dataset_size must be non-negative, got -5");
  EXPECT_EQ(message([] { distributed_indices(10, 2, 0, 0, -1); }),
            "distributed_indices: epoch must be non-negative, got -1");
}

}  // namespace
}  // namespace ddp
