// DistributedSampler as a torch::data sampler: the data loader, set_epoch through a copy, the
// second-pass warning, mid-epoch resume (struct and archive), bad arguments, and the same order in
// every process of a real process group.
#include <gtest/gtest.h>
#include <torch/data/dataloader.h>
#include <torch/data/datasets/base.h>
#include <torch/data/samplers/serialize.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/torch/distributed_sampler.h"
#include "sampler/sampler_warnings.h"
#include "support/multiprocess.h"
#include "util/log.h"

namespace ddp {
namespace {

// Sample i is the index i itself: the loader's batches show the sampler's order.
class IndexDataset : public torch::data::datasets::Dataset<IndexDataset, std::size_t> {
 public:
  explicit IndexDataset(std::size_t n) : n_(n) {}
  std::size_t get(std::size_t index) override { return index; }
  torch::optional<std::size_t> size() const override { return n_; }

 private:
  std::size_t n_;
};

template <typename Loader>
std::vector<std::int64_t> one_pass(Loader& loader, std::size_t max_batches = SIZE_MAX) {
  std::vector<std::int64_t> seen;
  std::size_t batches = 0;
  for (auto& batch : loader) {
    for (std::size_t i : batch) seen.push_back(static_cast<std::int64_t>(i));
    if (++batches == max_batches) break;
  }
  return seen;
}

auto make_loader(std::size_t n, const DistributedSampler& sampler, std::size_t batch_size, std::size_t workers = 0) {
  return torch::data::make_data_loader(IndexDataset(n), sampler,
                                       torch::data::DataLoaderOptions().batch_size(batch_size).workers(workers));
}

template <typename Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const Error& e) {
    return std::string("(Error) ") + e.what();
  }
  return "no error";
}

std::vector<std::int64_t> tail(const std::vector<std::int64_t>& v, std::size_t from) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from), v.end()};
}

TEST(DistributedSampler, DataLoaderYieldsTheRanksIndicesAndSetEpochOnACopyReshuffles) {
  DistributedSampler sampler(103, {.num_replicas = 4, .rank = 2, .seed = 3});
  EXPECT_EQ(sampler.size(), 26u);  // PyTorch's len(): ceil(103 / 4)
  auto loader = make_loader(103, sampler, 5);
  // The loader holds its own copy; copies share one state.
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    EXPECT_EQ(one_pass(*loader), distributed_indices(103, 4, 2, 3, epoch)) << "epoch " << epoch;
  }
  EXPECT_EQ(sampler.indices(), distributed_indices(103, 4, 2, 3, 2));
}

TEST(DistributedSampler, LenAndOptionsMatchPyTorch) {
  EXPECT_EQ(DistributedSampler(10, {.num_replicas = 4, .rank = 0}).size(), 3u);
  EXPECT_EQ(DistributedSampler(10, {.num_replicas = 4, .rank = 0, .drop_last = true}).size(), 2u);
  EXPECT_EQ(DistributedSampler(0, {.num_replicas = 4, .rank = 3}).size(), 0u);
  DistributedSampler plain(7, {.num_replicas = 2, .rank = 1, .shuffle = false});
  EXPECT_EQ(plain.next(100).value(), (std::vector<std::size_t>{1, 3, 5, 0}));  // padded from the start
  EXPECT_FALSE(plain.next(1).has_value());
}

TEST(DistributedSampler, DefaultsToTheProcessGroup) {
  // In a fresh process: no other test's process group, no launcher variables.
  test::RunOptions options;
  options.set_launch_env = false;
  test::run_ranks(
      1,
      [](int, int) {
    ASSERT_FALSE(is_initialized());
    EXPECT_EQ(error_of([] { DistributedSampler(10); }),
              "(Error) DistributedSampler: num_replicas and rank default to the world size and rank of the default "
              "process group, which is not initialized: call ddp::init_process_group(...) before building the "
              "sampler, or pass both .num_replicas and .rank");
    // Given both, no process group is needed.
    EXPECT_EQ(DistributedSampler(10, {.num_replicas = 3, .rank = 1}).size(), 4u);
    init_process_group("gloo");  // no launcher: a group of one
    DistributedSampler sampler(10);
    EXPECT_EQ(sampler.num_replicas(), 1);
    EXPECT_EQ(sampler.rank(), 0);
    EXPECT_EQ(sampler.size(), 10u);
    destroy_process_group();
      },
      options);
}

TEST(DistributedSampler, SameOrderInEveryProcess) {
  test::run_ranks(3, [](int rank, int world) {
    init_process_group("gloo");
    DistributedSampler sampler(1001, {.seed = 7});  // num_replicas, rank: the group's
    ASSERT_EQ(sampler.num_replicas(), world);
    ASSERT_EQ(sampler.rank(), rank);
    auto loader = make_loader(1001, sampler, 32);
    for (std::int64_t epoch : {0, 5}) {
      sampler.set_epoch(epoch);
      std::vector<std::int64_t> mine = one_pass(*loader);
      ASSERT_EQ(mine.size(), 334u);
      std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(world));
      get_default_group()->all_gather(buffer_of(mine.data(), mine.size()), buffer_of(all.data(), all.size()))->wait();
      std::multiset<std::int64_t> seen;
      for (int r = 0; r < world; ++r) {
        const std::vector<std::int64_t> shard(all.begin() + r * 334, all.begin() + (r + 1) * 334);
        EXPECT_EQ(shard, distributed_indices(1001, world, r, 7, epoch)) << "rank " << r << " epoch " << epoch;
        seen.insert(shard.begin(), shard.end());
      }
      std::set<std::int64_t> distinct(seen.begin(), seen.end());
      EXPECT_EQ(distinct.size(), 1001u);  // every index, plus one padding repeat
      EXPECT_EQ(seen.size(), 1002u);
    }
    destroy_process_group();
  });
}

TEST(DistributedSampler, SecondPassWithoutSetEpochWarnsOncePerProcess) {
  detail::set_log_level(detail::LogLevel::Warn);
  detail::reset_sampler_warnings_for_testing();
  DistributedSampler sampler(40, {.num_replicas = 2, .rank = 0});
  auto loader = make_loader(40, sampler, 8);

  testing::internal::CaptureStderr();
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    one_pass(*loader);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "set_epoch before every pass: no warning";

  testing::internal::CaptureStderr();
  const auto first = one_pass(*loader);   // epoch 2 again
  const auto second = one_pass(*loader);  // and again
  const std::string output = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, second);
  const std::string warning =
      "DistributedSampler: a second pass over epoch 2 started without set_epoch(), so it sees the same order as "
      "the last one. Call sampler.set_epoch(epoch) before each epoch, with the same value on every rank, as with "
      "PyTorch's DistributedSampler. (Shown once per process.)";
  ASSERT_NE(output.find(warning), std::string::npos) << output;
  EXPECT_EQ(output.find(warning), output.rfind(warning)) << "warned more than once:\n" << output;
  EXPECT_EQ(output.rfind("[ddp W ", 0), 0u) << output;

  // Once per process: another sampler repeating its epoch stays quiet.
  DistributedSampler other(40, {.num_replicas = 2, .rank = 1});
  auto other_loader = make_loader(40, other, 8);
  testing::internal::CaptureStderr();
  one_pass(*other_loader);
  one_pass(*other_loader);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  detail::reset_sampler_warnings_for_testing();
}

TEST(DistributedSampler, NoWarningWithoutShuffle) {
  detail::reset_sampler_warnings_for_testing();
  DistributedSampler plain(40, {.num_replicas = 2, .rank = 0, .shuffle = false});
  auto loader = make_loader(40, plain, 8);
  testing::internal::CaptureStderr();
  one_pass(*loader);
  one_pass(*loader);  // the order does not depend on the epoch: nothing to warn about
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  detail::reset_sampler_warnings_for_testing();
}

// DDP_LOG_LEVEL is read at a process's first log line, so this runs in a process that starts with it.
TEST(DistributedSampler, NoWarningWhenSilenced) {
  test::RunOptions options;
  options.set_launch_env = false;
  options.env = {{"DDP_LOG_LEVEL", "error"}};
  auto results = test::run_ranks(
      1,
      [](int, int) {
    DistributedSampler shuffled(40, {.num_replicas = 2, .rank = 0});
    auto loader = make_loader(40, shuffled, 8);
    one_pass(*loader);
    one_pass(*loader);  // a second pass without set_epoch: the warning, were it not silenced
      },
      options);
  if (test::is_rank_process()) return;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].output.find("a second pass over epoch"), std::string::npos) << results[0].output;
}

TEST(DistributedSampler, ResumesMidEpochWithExactlyTheNextBatch) {
  const DistributedSamplerOptions options{.num_replicas = 3, .rank = 1, .seed = 99};
  const std::vector<std::int64_t> full = distributed_indices(500, 3, 1, 99, 4);

  // The interrupted run: epoch 4, 5 batches of 16 (workers == 0: the sampler is not ahead).
  DistributedSampler before(500, options);
  auto loader = make_loader(500, before, 16);
  before.set_epoch(4);
  const auto done = one_pass(*loader, 5);
  ASSERT_EQ(done, std::vector<std::int64_t>(full.begin(), full.begin() + 80));
  const DistributedSamplerState state = before.state();
  EXPECT_EQ(state.epoch, 4);
  EXPECT_EQ(state.seed, 99u);
  EXPECT_EQ(state.consumed, 80);
  EXPECT_EQ(state.dataset_size, 500);
  EXPECT_EQ(state.num_replicas, 3);

  // The resumed run: a new sampler (another seed in its options: the state's wins), the usual loop.
  DistributedSampler after(500, {.num_replicas = 3, .rank = 1, .seed = 1});
  after.set_state(state);
  auto resumed_loader = make_loader(500, after, 16);
  after.set_epoch(4);  // the training loop's set_epoch(start_epoch) keeps the position
  EXPECT_EQ(one_pass(*resumed_loader), tail(full, 80));
  after.set_epoch(5);
  EXPECT_EQ(one_pass(*resumed_loader), distributed_indices(500, 3, 1, 99, 5));
}

TEST(DistributedSampler, ResumeWorksFromAnyRanksState) {
  // All ranks consume the same count: rank 0's checkpoint restores rank 2.
  DistributedSampler rank0(100, {.num_replicas = 3, .rank = 0, .seed = 5});
  rank0.set_epoch(1);
  rank0.next(10);
  DistributedSampler rank2(100, {.num_replicas = 3, .rank = 2, .seed = 5});
  rank2.set_state(rank0.state());
  rank2.reset();
  EXPECT_EQ(rank2.next(1000).value().size(), 24u);  // 34 - 10
  std::vector<std::size_t> expected;
  for (auto i : tail(distributed_indices(100, 3, 2, 5, 1), 10)) expected.push_back(static_cast<std::size_t>(i));
  rank2.set_state(rank0.state());
  EXPECT_EQ(rank2.next(1000).value(), expected);
}

TEST(DistributedSampler, ResumeWithPrefetchingWorkersUsesTheBatchCount) {
  const std::vector<std::int64_t> full = distributed_indices(300, 2, 0, 0, 2);
  DistributedSampler before(300, {.num_replicas = 2, .rank = 0});
  before.set_epoch(2);
  auto loader = make_loader(300, before, 10, /*workers=*/2);
  const auto done = one_pass(*loader, 4);
  ASSERT_EQ(done, std::vector<std::int64_t>(full.begin(), full.begin() + 40));
  DistributedSamplerState state = before.state();
  EXPECT_GE(state.consumed, 40);  // the loader may have asked for more than it delivered
  state.consumed = 4 * 10;        // what the training loop received

  DistributedSampler after(300, {.num_replicas = 2, .rank = 0});
  after.set_state(state);
  auto resumed = make_loader(300, after, 10, /*workers=*/2);
  EXPECT_EQ(one_pass(*resumed), tail(full, 40));
}

TEST(DistributedSampler, SaveAndLoadThroughTorchArchives) {
  DistributedSampler before(64, {.num_replicas = 2, .rank = 1, .seed = ~std::uint64_t{0} - 3});
  before.set_epoch(2);
  const auto first = before.next(7).value();
  std::stringstream stream;
  torch::save(before, stream);  // samplers/serialize.h: archive << sampler

  DistributedSampler after(64, {.num_replicas = 2, .rank = 1});
  torch::load(after, stream);
  EXPECT_EQ(after.state().seed, ~std::uint64_t{0} - 3);
  EXPECT_EQ(after.state().consumed, 7);
  after.reset();  // what the loader's begin() does: continues the restored pass
  EXPECT_EQ(after.next(100).value(), before.next(100).value());

  torch::serialize::OutputArchive empty_out;
  std::stringstream empty_stream;
  empty_out.save_to(empty_stream);
  torch::serialize::InputArchive empty_in;
  empty_in.load_from(empty_stream);
  EXPECT_EQ(error_of([&] { after.load(empty_in); }),
            "DistributedSampler::load: the archive holds no DistributedSampler state (no integer "
            "'ddp_distributed_sampler_epoch'): was it written by DistributedSampler::save?");
}

TEST(DistributedSampler, EndOfEpochStateResumesAnEmptyPass) {
  DistributedSampler before(10, {.num_replicas = 2, .rank = 0});
  while (before.next(3)) {
  }
  const auto state = before.state();
  EXPECT_EQ(state.consumed, 5);
  DistributedSampler after(10, {.num_replicas = 2, .rank = 0});
  after.set_state(state);
  after.reset();
  EXPECT_FALSE(after.next(3).has_value());
  after.set_epoch(1);
  after.reset();
  EXPECT_EQ(after.next(10).value().size(), 5u);
}

TEST(DistributedSampler, SetEpochTakesEffectAtTheNextPass) {
  DistributedSampler sampler(50, {.num_replicas = 1, .rank = 0});
  const auto e0 = distributed_indices(50, 1, 0, 0, 0);
  const auto e1 = distributed_indices(50, 1, 0, 0, 1);
  auto first = sampler.next(10).value();
  sampler.set_epoch(1);  // mid-pass: the pass keeps epoch 0's order
  auto rest = sampler.next(100).value();
  first.insert(first.end(), rest.begin(), rest.end());
  EXPECT_EQ(std::vector<std::int64_t>(first.begin(), first.end()), e0);
  EXPECT_EQ(sampler.state().epoch, 0);  // the pass under way
  sampler.reset();
  const auto next = sampler.next(100).value();
  EXPECT_EQ(std::vector<std::int64_t>(next.begin(), next.end()), e1);
}

TEST(DistributedSampler, ResetWithANewSize) {
  detail::reset_sampler_warnings_for_testing();
  DistributedSampler sampler(10, {.num_replicas = 2, .rank = 1, .seed = 4});
  sampler.next(2);
  testing::internal::CaptureStderr();
  sampler.reset(21);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "a new size is a new order: no warning";
  EXPECT_EQ(sampler.size(), 11u);
  EXPECT_EQ(sampler.dataset_size(), 21u);
  const auto all = sampler.next(100).value();
  EXPECT_EQ(std::vector<std::int64_t>(all.begin(), all.end()), distributed_indices(21, 2, 1, 4, 0));
}

TEST(DistributedSampler, BadArgumentsSayWhatIsWrongAndHowToFixIt) {
  EXPECT_EQ(error_of([] { DistributedSampler(10, {.num_replicas = 2, .rank = 3}); }),
            "DistributedSampler: rank 3 is not less than num_replicas 2: a rank must be in [0, 1]; pass the "
            "process's rank and the world size");
  EXPECT_EQ(error_of([] { DistributedSampler(10, {.num_replicas = 2, .rank = -1}); }),
            "DistributedSampler: rank must be non-negative, got -1");
  EXPECT_EQ(error_of([] { DistributedSampler(10, {.num_replicas = 0, .rank = 0}); }),
            "DistributedSampler: num_replicas must be at least 1, got 0: it is the number of processes sharing the "
            "dataset (by default the world size)");
  EXPECT_EQ(error_of([] { DistributedSampler(10, {.num_replicas = -3, .rank = 0}); }),
            "DistributedSampler: num_replicas must be at least 1, got -3: it is the number of processes sharing the "
            "dataset (by default the world size)");
  const std::size_t negative = static_cast<std::size_t>(-1);
  EXPECT_EQ(error_of([&] { DistributedSampler(negative, {.num_replicas = 1, .rank = 0}); }),
            "DistributedSampler: dataset_size 18446744073709551615 does not fit in int64 (a negative size converted "
            "to size_t?)");

  DistributedSampler sampler(10, {.num_replicas = 2, .rank = 0});
  EXPECT_EQ(error_of([&] { sampler.set_epoch(-1); }),
            "DistributedSampler::set_epoch: epoch must be non-negative, got -1");
  EXPECT_EQ(error_of([&] { sampler.next(0); }), "DistributedSampler::next: batch_size must be at least 1, got 0");
}

TEST(DistributedSampler, SetStateRejectsAStateOfAnotherSetup) {
  DistributedSampler sampler(10, {.num_replicas = 2, .rank = 0});
  DistributedSamplerState state{.epoch = 1, .seed = 0, .consumed = 2, .dataset_size = 11, .num_replicas = 2};
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: the state was saved with dataset_size 11, this sampler has 10: the "
            "epoch's permutation depends on it, so its position means nothing here. To start that epoch afresh, "
            "call set_epoch(state.epoch) instead");
  state.dataset_size = 10;
  state.consumed = 6;
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: consumed 6 is outside [0, 5], the indices a rank reads per epoch");
  state.consumed = -1;
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: consumed -1 is outside [0, 5], the indices a rank reads per epoch");
  state.num_replicas = 4;  // another world size is fine; its ranks read 3 each
  state.consumed = 4;
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: consumed 4 is outside [0, 3], the indices a rank reads per epoch");
  state.start = 6;
  state.consumed = 2;
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: consumed 2 is outside [0, 1], the indices a rank reads in a pass from "
            "sample 6");
  state.start = 11;
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: start 11 is outside [0, 10], the samples of an epoch");
  state.start = 0;
  state.num_replicas = 0;
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: num_replicas 0 is not a world size (at least 1)");
  state.num_replicas = 2;
  state.consumed = 0;
  state.epoch = -2;
  EXPECT_EQ(error_of([&] { sampler.set_state(state); }),
            "DistributedSampler::set_state: epoch must be non-negative, got -2");
}

// The indices every rank of `world` reads from `sampler_state` on, through a data loader each.
std::vector<std::int64_t> rest_of_epoch(std::int64_t n, int world, const DistributedSamplerState& saved,
                                        std::vector<std::size_t>* pass_sizes = nullptr) {
  std::vector<std::int64_t> seen;
  for (int rank = 0; rank < world; ++rank) {
    DistributedSampler sampler(static_cast<std::size_t>(n), {.num_replicas = world, .rank = rank});
    sampler.set_state(saved);
    if (pass_sizes) pass_sizes->push_back(sampler.pass_size());
    auto loader = make_loader(static_cast<std::size_t>(n), sampler, 4);
    sampler.set_epoch(saved.epoch);  // the training loop's: keeps the restored position
    const auto mine = one_pass(*loader);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  return seen;
}

TEST(DistributedSampler, ResumesAtAnotherWorldSizeWithTheRestOfTheEpoch) {
  // 100 samples over 3 ranks (34 each, 2 of them padding); after 4 batches of 8 on each, the job
  // has consumed 96 positions: the other 4 samples go to the 2 ranks of the resumed run.
  std::vector<std::int64_t> seen;
  DistributedSamplerState saved;
  for (int rank = 0; rank < 3; ++rank) {
    DistributedSampler sampler(100, {.num_replicas = 3, .rank = rank, .seed = 11});
    auto loader = make_loader(100, sampler, 8);
    sampler.set_epoch(2);
    const auto done = one_pass(*loader, 4);
    seen.insert(seen.end(), done.begin(), done.end());
    if (rank == 0) saved = sampler.state();
  }
  EXPECT_EQ(saved.consumed, 32);
  EXPECT_EQ(saved.num_replicas, 3);
  EXPECT_EQ(saved.samples_consumed(), 96);
  std::vector<std::size_t> sizes;
  const auto rest = rest_of_epoch(100, 2, saved, &sizes);
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2, 2}));
  seen.insert(seen.end(), rest.begin(), rest.end());
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> every(100);
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(seen, every) << "each sample of the epoch once";

  // And through an archive, into 5 ranks: the state says where the resumed pass began.
  DistributedSampler one(100, {.num_replicas = 5, .rank = 1});
  std::stringstream stream;
  {
    DistributedSampler source(100, {.num_replicas = 3, .rank = 0, .seed = 11});
    source.set_state(saved);
    torch::save(source, stream);
  }
  torch::load(one, stream);
  const DistributedSamplerState resumed = one.state();
  EXPECT_EQ(resumed.start, 96);
  EXPECT_EQ(resumed.consumed, 0);
  EXPECT_EQ(resumed.num_replicas, 5);
  EXPECT_EQ(resumed.samples_consumed(), 96);
  EXPECT_EQ(one.pass_size(), 1u);  // 4 samples for 5 ranks: one each, the fifth a repeat (padding)
  EXPECT_EQ(one.size(), 20u);      // a whole epoch's share
  one.reset();
  EXPECT_EQ(one.next(10).value(),
            std::vector<std::size_t>{static_cast<std::size_t>(distributed_pass_indices(100, 5, 1, 11, 2, 96)[0])});
  // Its next epoch is PyTorch's again.
  one.set_epoch(3);
  one.reset();
  const auto epoch3 = one.next(100).value();
  EXPECT_EQ(std::vector<std::int64_t>(epoch3.begin(), epoch3.end()), distributed_indices(100, 5, 1, 11, 3));
  EXPECT_EQ(one.state().start, 0);
}

TEST(DistributedSampler, AStateSavedMidwayThroughAResumedPassResumesAgain) {
  // 3 ranks -> 2 ranks -> 4 ranks within one epoch of 61 samples.
  DistributedSampler r0(61, {.num_replicas = 3, .rank = 0});
  r0.next(5);
  DistributedSampler second(61, {.num_replicas = 2, .rank = 0});
  second.set_state(r0.state());  // 15 consumed
  second.reset();
  second.next(7);
  const DistributedSamplerState again = second.state();
  EXPECT_EQ(again.start, 15);
  EXPECT_EQ(again.samples_consumed(), 29);
  std::vector<std::int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    const auto all = distributed_indices(61, 3, rank, 0, 0);
    seen.insert(seen.end(), all.begin(), all.begin() + 5);
  }
  for (int rank = 0; rank < 2; ++rank) {
    const auto all = distributed_pass_indices(61, 2, rank, 0, 0, 15);
    seen.insert(seen.end(), all.begin(), all.begin() + 7);
  }
  const auto rest = rest_of_epoch(61, 4, again);
  seen.insert(seen.end(), rest.begin(), rest.end());
  // 15 at 3 ranks, 14 at 2, the last 32 at 4 (8 each: no padding needed).
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> every(61);
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(seen, every) << "each sample of the epoch once";
}

TEST(DistributedSampler, AnArchiveOfAnEarlierVersionHasNoStartAndResumesAtItsWorldSize) {
  torch::serialize::OutputArchive out;
  out.write("ddp_distributed_sampler_epoch", c10::IValue(std::int64_t{1}));
  out.write("ddp_distributed_sampler_seed", c10::IValue(std::int64_t{3}));
  out.write("ddp_distributed_sampler_consumed", c10::IValue(std::int64_t{4}));
  out.write("ddp_distributed_sampler_dataset_size", c10::IValue(std::int64_t{20}));
  out.write("ddp_distributed_sampler_num_replicas", c10::IValue(std::int64_t{2}));
  std::stringstream stream;
  out.save_to(stream);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  DistributedSampler sampler(20, {.num_replicas = 2, .rank = 1});
  sampler.load(in);
  sampler.reset();
  const auto rest = sampler.next(100).value();
  const auto full = distributed_indices(20, 2, 1, 3, 1);
  EXPECT_EQ(std::vector<std::int64_t>(rest.begin(), rest.end()), tail(full, 4));
}

TEST(DistributedSampler, WithoutEvenShardsRanksGetTheirExactShare) {
  DistributedSampler rank0(10, {.num_replicas = 4, .rank = 0, .even_shards = false});
  DistributedSampler rank3(10, {.num_replicas = 4, .rank = 3, .even_shards = false});
  EXPECT_EQ(rank0.size(), 3u);
  EXPECT_EQ(rank3.size(), 2u);
  EXPECT_EQ(rank3.indices(), distributed_pass_indices(10, 4, 3, 0, 0, 0, true, false, false));
  EXPECT_EQ(
      error_of([] { DistributedSampler(10, {.num_replicas = 4, .rank = 0, .drop_last = true, .even_shards = false}); }),
      "DistributedSampler: drop_last trims the shards to one length, and even_shards = false gives each rank "
      "exactly its share: choose one");
}

}  // namespace
}  // namespace ddp
