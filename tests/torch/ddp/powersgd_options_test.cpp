// PowerSGD's bad options and bad saved states are clear errors (no processes needed).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/error.h"
#include "ddp/torch/powersgd.h"
#include "reopened_archive.h"
#include "support/expect_error.h"

namespace ddp::test {
namespace {

using comm_hooks::PowerSGDOptions;
using comm_hooks::PowerSGDState;

TEST(PowerSgdOptions, BadOptionsAreRefusedWithTheReason) {
  auto refused = [](PowerSGDOptions options, std::initializer_list<std::string> fragments) {
    expect_error<InvalidArgument>([&] { PowerSGDState state(options); }, fragments);
  };
  refused({.matrix_approximation_rank = 0}, {"matrix_approximation_rank is 0", "at least 1"});
  refused({.matrix_approximation_rank = -3}, {"matrix_approximation_rank is -3"});
  refused({.start_powerSGD_iter = -1, .use_error_feedback = false, .warm_start = false},
          {"start_powerSGD_iter is -1", ">= 0"});
  refused({.start_powerSGD_iter = 1}, {"start_powerSGD_iter is 1", "must be > 1", "rebuilds its buckets"});
  refused({.start_powerSGD_iter = 0, .use_error_feedback = false}, {"start_powerSGD_iter is 0", "warm_start"});
  refused({.min_compression_rate = -0.5}, {"min_compression_rate is -0.5", ">= 0"});
  refused({.min_compression_rate = std::nan("")}, {"min_compression_rate is nan"});
  refused({.orthogonalization_epsilon = -1e-8}, {"orthogonalization_epsilon is -1e-08", ">= 0"});
  // Without error feedback and warm start, compression may start at once (as in PyTorch).
  EXPECT_NO_THROW(PowerSGDState({.start_powerSGD_iter = 0, .use_error_feedback = false, .warm_start = false}));
  expect_error<InvalidArgument>([] { comm_hooks::powersgd(std::shared_ptr<PowerSGDState>()); },
                                {"powersgd", "state is null"});
}

TEST(PowerSgdOptions, SavedStateRoundTripsAndBadArchivesAreNamed) {
  PowerSGDState saved({.matrix_approximation_rank = 4,
                       .start_powerSGD_iter = 7,
                       .min_compression_rate = 1.5,
                       .use_error_feedback = false,
                       .warm_start = true,
                       .orthogonalization_epsilon = 1e-6,
                       .random_seed = 4000000000u,
                       .batch_tensors_with_same_shape = true});
  torch::serialize::OutputArchive out;
  saved.save(out);
  auto in = reopened(out);
  PowerSGDState loaded;
  loaded.load(in);
  const auto& o = loaded.options();
  EXPECT_EQ(o.matrix_approximation_rank, 4);
  EXPECT_EQ(o.start_powerSGD_iter, 7);
  EXPECT_EQ(o.min_compression_rate, 1.5);
  EXPECT_FALSE(o.use_error_feedback);
  EXPECT_TRUE(o.warm_start);
  EXPECT_EQ(o.orthogonalization_epsilon, 1e-6);
  EXPECT_EQ(o.random_seed, 4000000000u);
  EXPECT_TRUE(o.batch_tensors_with_same_shape);

  torch::serialize::OutputArchive empty_out;
  auto empty = reopened(empty_out);
  expect_error<Error>([&] { loaded.load(empty); },
                      {"PowerSGDState::load", "no 'matrix_approximation_rank'", "PowerSGDState::save"});
  EXPECT_EQ(loaded.options().matrix_approximation_rank, 4);  // a failed load changes nothing

  auto altered = [&](const std::string& key, c10::IValue value) {
    torch::serialize::OutputArchive changed;
    saved.save(changed);
    changed.write(key, value);  // replaces the saved value (of the same type)
    return reopened(changed);
  };
  torch::serialize::OutputArchive wrong_out;
  wrong_out.write("matrix_approximation_rank", c10::IValue(2.5));
  auto wrong_type = reopened(wrong_out);
  expect_error<Error>([&] { loaded.load(wrong_type); },
                      {"PowerSGDState::load", "'matrix_approximation_rank' is a Double", "not an integer"});
  auto bad_rng = altered("rng", c10::IValue(std::string("12 34 not a state")));
  expect_error<Error>([&] { loaded.load(bad_rng); }, {"'rng' is not the text of an MT19937 state"});
  auto bad_rank = altered("matrix_approximation_rank", c10::IValue(static_cast<std::int64_t>(0)));
  expect_error<InvalidArgument>([&] { loaded.load(bad_rank); }, {"matrix_approximation_rank is 0"});
  auto bad_seed = altered("random_seed", c10::IValue(static_cast<std::int64_t>(-1)));
  expect_error<Error>([&] { loaded.load(bad_seed); }, {"'random_seed' is -1", "32-bit seed"});
}

}  // namespace
}  // namespace ddp::test
