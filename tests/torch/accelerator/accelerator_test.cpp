// ddp::Accelerator on real processes: settings from the code and the launch, the accumulation's
// micro-steps, the padding dropped from gathered metrics, the errors its misuses get, and fp16's
// skipped step. The example's end-to-end runs are in tests/examples/accelerate_test.cpp.
#include "ddp/torch/accelerator.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "accelerator/settings.h"
#include "ddp/torch/checkpoint.h"
#include "compat/torch_compat.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

detail::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(AcceleratorSettings, TheCodeWinsOverTheLaunchWhichWinsOverTheDefaults) {
  const auto none = detail::resolve_settings({}, env_of({}));
  EXPECT_EQ(none.mixed_precision, MixedPrecision::kNo);
  EXPECT_EQ(none.gradient_accumulation_steps, 1);
  EXPECT_FALSE(none.cpu);
  const auto launch = env_of({{"ACCELERATE_MIXED_PRECISION", "BF16"},
                              {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                              {"ACCELERATE_USE_CPU", "true"}});
  const auto from_launch = detail::resolve_settings({}, launch);
  EXPECT_EQ(from_launch.mixed_precision, MixedPrecision::kBF16);
  EXPECT_EQ(from_launch.gradient_accumulation_steps, 4);
  EXPECT_TRUE(from_launch.cpu);
  const auto code = detail::resolve_settings(
      {.mixed_precision = MixedPrecision::kNo, .gradient_accumulation_steps = 2, .cpu = false}, launch);
  EXPECT_EQ(code.mixed_precision, MixedPrecision::kNo);
  EXPECT_EQ(code.gradient_accumulation_steps, 2);
  EXPECT_FALSE(code.cpu);
}

TEST(AcceleratorSettings, ABadValueNamesWhereItCameFrom) {
  test::expect_error<InvalidArgument>(
      [] {
    detail::resolve_settings({}, env_of({{"ACCELERATE_MIXED_PRECISION", "fp8"}}));
      },
      {"ACCELERATE_MIXED_PRECISION (ddprun --mixed_precision) is 'fp8'", "no, fp16 or bf16", "Transformer Engine"});
  for (const char* bad : {"0", "two", "3x", ""}) {
    test::expect_error<InvalidArgument>(
        [&] {
      detail::resolve_settings({}, env_of({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", bad}}));
        },
        {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1 or more"});
  }
  test::expect_error<InvalidArgument>([] { detail::resolve_settings({.gradient_accumulation_steps = 0}, env_of({})); },
                                      {"gradient_accumulation_steps is 0"});
  test::expect_error<InvalidArgument>(
      [] {
    detail::resolve_settings({}, env_of({{"ACCELERATE_USE_CPU", "maybe"}}));
      },
      {"ACCELERATE_USE_CPU (ddprun --cpu) is 'maybe'"});
}

TEST(AcceleratorMetrics, TheSamplersPaddingIsDroppedFromTheGatheredRows) {
  // 10 samples over 3 ranks, batches of 2: the second batch holds positions 6..11, and 10, 11
  // repeat the first samples (rank 1's and rank 2's second rows).
  EXPECT_EQ(detail::real_rows(10, 3, 0, 1, 2, 2), (std::vector<std::int64_t>{0, 1, 2, 4}));
  EXPECT_EQ(detail::real_rows(10, 3, 0, 0, 2, 2), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
  // A pass resumed from position 4 of 10 at 2 ranks, batches of 4: rank r reads 4 + r, 6 + r, ...
  EXPECT_EQ(detail::real_rows(10, 2, 4, 0, 4, 3), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(detail::real_rows(9, 1, 0, 2, 4, 1), (std::vector<std::int64_t>{0}));
}

// n samples: x = [i, i, i, i] as float, y = i % 2.
struct Numbers : torch::data::datasets::Dataset<Numbers> {
  explicit Numbers(std::size_t n) : n(n) {}
  torch::data::Example<> get(std::size_t i) override {
    return {torch::full({4}, static_cast<float>(i)), torch::tensor(static_cast<std::int64_t>(i % 2))};
  }
  torch::optional<std::size_t> size() const override { return n; }
  std::size_t n;
};

struct Endless : torch::data::datasets::Dataset<Endless> {
  torch::data::Example<> get(std::size_t) override { return {torch::zeros({4}), torch::tensor(0)}; }
  torch::optional<std::size_t> size() const override { return torch::nullopt; }
};

test::RunOptions launch(std::map<std::string, std::string> env = {}) {
  test::RunOptions options;
  options.env = std::move(env);
  options.env["DDP_SHM"] = "0";
  return options;
}

TEST(Accelerator, OneProcessWithoutALauncherIsAGroupOfOneAndRefusesMisuse) {
  test::RunOptions options = launch();
  options.set_launch_env = false;
  test::run_ranks(
      1,
      [](int, int) {
    Accelerator acc;
    EXPECT_EQ(acc.num_processes(), 1);
    EXPECT_TRUE(acc.is_main_process());
    EXPECT_EQ(acc.device(), c10::Device(c10::kCPU));
    torch::nn::Linear linear(4, 2);
    auto model = acc.prepare(linear);
    EXPECT_EQ(model.ddp(), nullptr);  // no DDP in a world of one
    test::expect_error<Error>([&] { (void)acc.prepare(linear); }, {"this model was prepared before"});
    test::expect_error<InvalidArgument>([&] { (void)acc.prepare(Endless(), {.batch_size = 2}); },
                                        {"the dataset has no size", "give the dataset a size()"});
    test::expect_error<InvalidArgument>([&] { (void)acc.prepare(Numbers(4), {.batch_size = 0}); },
                                        {"batch_size 0", "1 or more"});
    // An empty dataset's pass has no batch, and the epoch still moves on (a loop over epochs ends).
    auto empty = acc.prepare(Numbers(0), {.batch_size = 2});
    for (auto& batch : empty) ADD_FAILURE() << "a batch from an empty dataset: " << batch.data;
    EXPECT_EQ(empty.epoch(), 1);
    auto optimizer = std::make_shared<torch::optim::SGD>(linear->parameters(), torch::optim::SGDOptions(0.1));
    (void)acc.prepare(optimizer);
    test::expect_error<Error>([&] { (void)acc.prepare(optimizer); }, {"this optimizer was prepared before"});
    const auto dir = fs::temp_directory_path() / ("ddp-acc-empty-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    test::expect_error<IOError>([&] { acc.load_state(dir.string()); }, {"holds no checkpoint", "save_state"});
    fs::remove_all(dir);
      },
      options);
}

// 2 ranks, 20 samples, batches of 2: 5 batches per rank and pass. With 3 micro-steps per step the
// gradients synchronize at the 3rd batch and at the pass's last (5th): 2 optimizer steps.
TEST(Accelerator, AccumulationSynchronizesOnTheLastMicroStepAndAtThePassesEnd) {
  test::run_ranks(
      2,
      [](int, int) {
    Accelerator acc({.gradient_accumulation_steps = 3});
    torch::manual_seed(0);
    auto model = acc.prepare(torch::nn::Linear(4, 2));
    auto optimizer = acc.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.01)));
    auto loader = acc.prepare(Numbers(20), {.batch_size = 2});
    EXPECT_EQ(loader.size(), 5);
    std::vector<bool> syncs;
    for (auto& batch : loader) {
      auto scope = acc.accumulate(model);
      syncs.push_back(scope.sync_gradients());
      acc.backward(torch::cross_entropy_loss(model(batch.data), batch.target));
      if (!acc.sync_gradients()) {
        test::expect_error<Error>([&] { acc.clip_grad_norm_(model->parameters(), 1.0); },
                                  {"does not synchronize gradients", "sync_gradients() is true"});
      }
      optimizer.step();
      optimizer.zero_grad();
    }
    EXPECT_EQ(syncs, (std::vector<bool>{false, false, true, false, true}));
    EXPECT_EQ(acc.step(), 2);
    EXPECT_EQ(loader.epoch(), 1);
    // A micro-step outside accumulate() cannot step: which micro-step it is would be unknown.
    acc.backward(model(torch::ones({1, 4})).sum());
    test::expect_error<Error>([&] { optimizer.step(); }, {"was not inside acc.accumulate(model)"});
      },
      launch());
}

// 3 ranks over 10 samples, batches of 2: the second batch's padding (2 of its 6 rows) is not
// gathered, so an epoch's gathered rows are the 10 samples once each.
TEST(Accelerator, GatherForMetricsCountsEverySampleOnce) {
  test::run_ranks(
      3,
      [](int, int) {
    Accelerator acc;
    auto loader = acc.prepare(Numbers(10), {.batch_size = 2, .shuffle = false});
    std::vector<std::int64_t> seen;
    for (auto& batch : loader) {
      auto ids = acc.gather_for_metrics(batch.data.select(1, 0).to(torch::kLong));
      for (std::int64_t i = 0; i < ids.size(0); ++i) seen.push_back(ids[i].item<std::int64_t>());
      auto scalar = acc.gather_for_metrics(torch::tensor(1.0));  // a scalar: one row per rank
      EXPECT_EQ(scalar.size(0), 3);
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
      },
      launch());
}

TEST(Accelerator, SavingNeedsOneDirectoryOnEveryRankAndAFailedWriteFailsEveryRank) {
  test::run_ranks(
      2,
      [](int rank, int) {
    // The ranks are processes of their own: the job's master port names their common folder.
    const auto root = fs::temp_directory_path() / (std::string("ddp-acc-save-") + std::getenv("MASTER_PORT"));
    Accelerator acc;
    auto model = acc.prepare(torch::nn::Linear(4, 2));
    const auto mine = (root / ("rank" + std::to_string(rank))).string();
    test::expect_error<InvalidArgument>(
        [&] { acc.save_state(mine); },
        {"rank(s) 1 passed another directory than the main process's", (root / "rank0").string(), "same directory"});
    test::expect_error<InvalidArgument>([&] { acc.save_model(model, mine); }, {"Accelerator::save_model"});
    // /proc takes no new folders: rank 0 cannot write, and rank 1 is told so instead of going on.
    test::expect_error<IOError>([&] { acc.save_state("/proc/ddp-accelerator-test"); }, {"/proc/ddp-accelerator-test"});
    acc.save_state((root / "shared").string());
    EXPECT_EQ(Checkpoints({.directory = (root / "shared").string(), .prefix = "state"}).list().size(), 1u);
    acc.wait_for_everyone();
    if (rank == 0) fs::remove_all(root);
      },
      launch());
}

// A new user's resume with another per-rank batch size: the checkpoint is intact and refused, so
// the refusal (naming the batch size to use) reaches them as itself, not a fallback to an older
// checkpoint ending in advice to delete intact files; with the saved batch size it loads.
TEST(Accelerator, ResumingWithAnotherBatchSizeIsRefusedNamingTheOneToUse) {
  test::run_ranks(
      2,
      [](int rank, int) {
    const auto root = fs::temp_directory_path() / (std::string("ddp-acc-resume-") + std::getenv("MASTER_PORT"));
    Accelerator acc;
    (void)acc.prepare(torch::nn::Linear(4, 2));
    (void)acc.prepare(Numbers(20), {.batch_size = 2});
    acc.save_state(root.string());
    Accelerator other;
    (void)other.prepare(torch::nn::Linear(4, 2));
    (void)other.prepare(Numbers(20), {.batch_size = 4});
    const auto message = test::expect_error<InvalidArgument>(
        [&] { other.load_state(root.string()); },
        {"loader 0 was saved with batch_size 2, this one has 4", "prepare the loader with .batch_size = 2"});
    EXPECT_EQ(message.find("no usable checkpoint"), std::string::npos) << message;
    EXPECT_EQ(message.find("Delete"), std::string::npos) << message;
    Accelerator same;
    (void)same.prepare(torch::nn::Linear(4, 2));
    (void)same.prepare(Numbers(20), {.batch_size = 2});
    same.load_state(root.string());
    acc.wait_for_everyone();
    if (rank == 0) fs::remove_all(root);
      },
      launch());
}

// fp16: a GradScaler; a step whose gradients hold inf is skipped, the window's gradients dropped,
// and the scale halved. Needs a LibTorch that autocasts the CPU to float16 (2.x); 1.13 is refused
// with the advice to use bf16.
TEST(Accelerator, Fp16OnTheCpuSkipsAStepWithInfiniteGradientsOrIsRefusedSayingWhy) {
  test::RunOptions options = launch({{"ACCELERATE_MIXED_PRECISION", "fp16"}});
  options.set_launch_env = false;
  test::run_ranks(
      1,
      [](int, int) {
    if (!compat::cpu_autocast_supports(at::kHalf)) {
      test::expect_error<InvalidArgument>([] { Accelerator acc; }, {"bfloat16"});
      return;
    }
    Accelerator acc;
    EXPECT_EQ(acc.mixed_precision(), MixedPrecision::kFP16);
    auto model = acc.prepare(torch::nn::Linear(4, 2));
    auto optimizer = acc.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1)));
    const auto before = model->weight.detach().clone();
    auto out = model(torch::ones({2, 4}));
    EXPECT_EQ(out.scalar_type(), torch::kFloat);  // outputs come back in float32
    acc.backward(out.sum() * std::numeric_limits<float>::infinity());
    optimizer.step();
    EXPECT_TRUE(optimizer.step_was_skipped());
    EXPECT_TRUE(torch::equal(model->weight, before));
    optimizer.zero_grad();
    EXPECT_FALSE(model->weight.grad().defined());
    EXPECT_EQ(acc.step(), 0);
      },
      options);
}

// Accumulating across a skipped step: with 2 micro-steps per step, an inf in the second skips the
// step and drops the whole window (the first micro-step's finite gradients too), and the next
// window starts from zero gradients and steps.
TEST(Accelerator, Fp16AccumulationAcrossASkippedStepDropsTheWholeWindow) {
  test::RunOptions options =
      launch({{"ACCELERATE_MIXED_PRECISION", "fp16"}, {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "2"}});
  options.set_launch_env = false;
  test::run_ranks(
      1,
      [](int, int) {
    if (!compat::cpu_autocast_supports(at::kHalf)) GTEST_SKIP() << "LibTorch 1.13 cannot autocast the CPU to float16";
    Accelerator acc;
    auto model = acc.prepare(torch::nn::Linear(4, 2));
    auto optimizer = acc.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1)));
    const auto before = model->weight.detach().clone();
    auto micro_step = [&](double factor) {
      auto scope = acc.accumulate(model);
      acc.backward(model(torch::ones({2, 4})).sum() * factor);
      optimizer.step();
      optimizer.zero_grad();
      return scope.sync_gradients();
    };
    EXPECT_FALSE(micro_step(1.0));  // accumulates
    EXPECT_TRUE(model->weight.grad().defined());
    EXPECT_TRUE(micro_step(std::numeric_limits<double>::infinity()));  // the window's last: skipped
    EXPECT_TRUE(optimizer.step_was_skipped());
    EXPECT_TRUE(torch::equal(model->weight, before));
    EXPECT_FALSE(model->weight.grad().defined());  // the whole window dropped
    EXPECT_FALSE(micro_step(1.0));
    EXPECT_TRUE(micro_step(1.0));
    EXPECT_FALSE(optimizer.step_was_skipped());
    EXPECT_FALSE(torch::equal(model->weight, before));
    EXPECT_EQ(acc.step(), 1);
      },
      options);
}

}  // namespace
}  // namespace ddp
