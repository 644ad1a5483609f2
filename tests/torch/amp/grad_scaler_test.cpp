// ddp::amp::GradScaler in one process: the scale's sequence over scripted finite and non-finite
// steps equals PyTorch's GradScaler (golden/grad_scaler.txt, from make_golden.py under PyTorch 1.13,
// and make_golden.py --print live under every reference PyTorch: 2.x's runs its CPU GradScaler),
// unscaling is exact, and every misuse PyTorch refuses is refused with a message.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "ddp/torch/amp.h"
#include "reopened_archive.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"
#include "support/reference_pythons.h"

namespace ddp::test {
namespace {

using ddp::amp::GradScaler;

struct GoldenCase {
  ddp::amp::GradScalerOptions options;
  std::string pattern;
  std::vector<int> stepped;
  std::vector<double> scales;
  std::vector<int> trackers;
  std::string line;
};

// make_golden.py's lines: "init growth backoff interval pattern : stepped/scale/tracker ...".
std::vector<GoldenCase> parse_cases(std::istream& in) {
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" : ") == std::string::npos) continue;  // anything else a Python printed
    GoldenCase c;
    c.line = line;
    std::istringstream fields(line);
    std::string colon, result;
    fields >> c.options.init_scale >> c.options.growth_factor >> c.options.backoff_factor >>
        c.options.growth_interval >> c.pattern >> colon;
    while (fields >> result) {  // stepped/scale/tracker
      const auto a = result.find('/'), b = result.rfind('/');
      c.stepped.push_back(std::stoi(result.substr(0, a)));
      c.scales.push_back(std::stod(result.substr(a + 1, b - a - 1)));
      c.trackers.push_back(std::stoi(result.substr(b + 1)));
    }
    cases.push_back(c);
  }
  return cases;
}

// Replays each case's pattern through ddp's GradScaler, as make_golden.py's run() does PyTorch's.
void expect_scale_sequences(const std::vector<GoldenCase>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    ASSERT_EQ(c.scales.size(), c.pattern.size());
    GradScaler scaler(c.options);
    auto w = torch::ones({3}, torch::requires_grad());
    auto v = torch::ones({2}, torch::requires_grad());
    torch::optim::SGD first({w}, 0.1), second({v}, 0.1);
    for (std::size_t k = 0; k < c.pattern.size(); ++k) {
      const char letter = c.pattern[k];
      first.zero_grad();
      second.zero_grad();
      const auto before = w.detach().clone();
      scaler.scale((w * 2).sum() + (v * 3).sum()).sum().backward();
      {
        torch::NoGradGuard no_grad;
        if (letter == 'i') w.mutable_grad()[1] = std::numeric_limits<float>::infinity();
        if (letter == 'n') w.mutable_grad()[0] = std::numeric_limits<float>::quiet_NaN();
        if (letter == '2') v.mutable_grad()[0] = std::numeric_limits<float>::infinity();
      }
      if (letter == 'u') scaler.unscale_(first);
      const bool stepped = scaler.step(first);
      if (letter == '2') scaler.step(second);
      scaler.update();
      EXPECT_EQ(stepped, c.stepped[k] == 1) << "iteration " << k;
      EXPECT_EQ(!torch::equal(before, w.detach()), stepped) << "iteration " << k << ": the parameters";
      EXPECT_EQ(static_cast<float>(scaler.get_scale()), static_cast<float>(c.scales[k])) << "iteration " << k;
      EXPECT_EQ(scaler.get_growth_tracker(), c.trackers[k]) << "iteration " << k;
    }
  }
}

TEST(GradScaler, ScaleSequenceEqualsPyTorchsGradScalerOverScriptedInfAndNanSteps) {
  std::ifstream in(std::string(DDP_SOURCE_DIR) + "/tests/torch/amp/golden/grad_scaler.txt");
  const auto cases = parse_cases(in);
  ASSERT_EQ(cases.size(), 8u) << "golden/grad_scaler.txt is missing or incomplete";
  expect_scale_sequences(cases);
}

// The same cases, live: make_golden.py --print under each reference PyTorch.
class GradScalerPyTorch : public ::testing::TestWithParam<ReferencePython> {};

TEST_P(GradScalerPyTorch, ScaleSequenceEqualsThisPyTorchsGradScaler) {
  const auto python =
      run_command({GetParam().path, std::string(DDP_SOURCE_DIR) + "/tests/torch/amp/make_golden.py", "--print"}, {},
                  std::chrono::seconds(120));
  ASSERT_TRUE(python.ok()) << python.output;
  std::istringstream in(python.output);
  const auto cases = parse_cases(in);
  ASSERT_EQ(cases.size(), 8u) << python.output;
  std::cout << python.output.substr(0, python.output.find('\n') + 1);  // which GradScaler ran
  expect_scale_sequences(cases);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, GradScalerPyTorch, ::testing::ValuesIn(reference_pythons()), reference_name);

TEST(GradScaler, NextScaleIsTheKernelsArithmetic) {
  using ddp::amp::detail::next_scale;
  // Backoff in double, rounded once: 1.7f * 0.3 is not 1.7f * 0.3f.
  EXPECT_EQ(next_scale({1.7f, 5}, true, 2.0, 0.3, 10).scale, static_cast<float>(static_cast<double>(1.7f) * 0.3));
  EXPECT_EQ(next_scale({1.7f, 5}, true, 2.0, 0.3, 10).growth_tracker, 0);
  EXPECT_EQ(next_scale({8.0f, 1}, false, 2.0, 0.5, 3), (ddp::amp::detail::ScaleState{8.0f, 2}));
  EXPECT_EQ(next_scale({8.0f, 2}, false, 2.0, 0.5, 3), (ddp::amp::detail::ScaleState{16.0f, 0}));
  // Growth that would overflow float32 keeps the scale (and restarts the count).
  EXPECT_EQ(next_scale({3e38f, 0}, false, 2.0, 0.5, 1), (ddp::amp::detail::ScaleState{3e38f, 0}));
}

TEST(GradScaler, UnscalingAScaledBackwardGivesTheUnscaledGradientsExactly) {
  torch::manual_seed(3);
  torch::nn::Linear model(6, 4);
  const auto x = torch::randn({5, 6});
  model->zero_grad();
  model(x).pow(2).mean().backward();
  std::vector<at::Tensor> plain;
  for (const auto& p : model->parameters()) plain.push_back(p.grad().clone());

  GradScaler scaler;  // 2^16: multiplying and dividing by a power of two is exact
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  optimizer.zero_grad();
  auto scaled = scaler.scale(model(x).pow(2).mean());
  EXPECT_EQ(scaled.sizes(), at::IntArrayRef({1}));  // PyTorch's shape: loss * scale[1]
  scaled.backward();
  EXPECT_FALSE(torch::equal(model->parameters()[0].grad(), plain[0]));
  scaler.unscale_(optimizer);
  for (std::size_t i = 0; i < plain.size(); ++i)
    EXPECT_TRUE(torch::equal(model->parameters()[i].grad(), plain[i])) << i;
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 1);
}

TEST(GradScaler, MisuseIsRefusedAsInPyTorch) {
  auto w = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, 0.1);
  GradScaler scaler;
  expect_error<Error>([&] { scaler.unscale_(optimizer); },
                      {"GradScaler::unscale_", "there is no scale yet", "scaler.scale(loss)"});
  expect_error<Error>([&] { scaler.update(); }, {"GradScaler::update", "there is no scale yet"});
  scaler.scale(w.sum()).backward();
  expect_error<Error>([&] { scaler.update(); }, {"no inf checks were recorded prior to update()"});
  scaler.unscale_(optimizer);
  expect_error<Error>([&] { scaler.unscale_(optimizer); },
                      {"unscale_() has already been called on this optimizer since the last update()"});
  scaler.step(optimizer);
  expect_error<Error>([&] { scaler.unscale_(optimizer); }, {"unscale_() is being called after step()"});
  expect_error<Error>([&] { scaler.step(optimizer); }, {"step() has already been called since the last update()"});
  scaler.update();
  scaler.unscale_(optimizer);  // a new iteration: allowed again

  auto no_grad_param = torch::ones({2}, torch::requires_grad());
  torch::optim::SGD untouched({no_grad_param}, 0.1);
  expect_error<Error>([&] { scaler.step(untouched); }, {"no inf checks were recorded for this optimizer", "backward"});

  auto half = torch::ones({2}, torch::TensorOptions().dtype(at::kHalf).requires_grad(true));
  half.mutable_grad() = torch::ones({2}, at::kHalf);
  torch::optim::SGD fp16({half}, 0.1);
  expect_error<Error>([&] { scaler.unscale_(fp16); },
                      {"attempting to unscale FP16 gradients", "parameter 0 of group 0"});

  expect_error<InvalidArgument>([] { GradScaler bad({.growth_factor = 1.0}); }, {"growth_factor must be > 1"});
  expect_error<InvalidArgument>([] { GradScaler bad({.backoff_factor = 1.5}); }, {"backoff_factor must be < 1"});
}

TEST(GradScaler, DisabledPassesThrough) {
  auto w = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, 0.1);
  GradScaler scaler({.growth_factor = 0.1, .enabled = false});  // options are not checked when disabled
  auto loss = w.sum();
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.unscale_(optimizer);
  EXPECT_TRUE(torch::equal(w.grad(), torch::ones({3})));
  EXPECT_TRUE(scaler.step(optimizer));
  EXPECT_TRUE(torch::allclose(w.detach(), torch::full({3}, 0.9)));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
}

TEST(GradScaler, StateRoundTripsThroughAnArchiveWithPythonsKeys) {
  auto w = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, 0.1);
  GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  for (int k = 0; k < 2; ++k) {
    optimizer.zero_grad();
    scaler.scale(w.sum()).backward();
    scaler.step(optimizer);
    scaler.update();
  }
  torch::serialize::OutputArchive out;
  scaler.save(out);
  auto in = reopened(out);
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    c10::IValue value;
    EXPECT_TRUE(in.try_read(key, value)) << key;
  }
  GradScaler restored;  // defaults, replaced by the archive's values
  restored.load(in);
  EXPECT_EQ(restored.get_scale(), 1024.0);
  EXPECT_EQ(restored.get_growth_tracker(), 2);
  EXPECT_EQ(restored.options().growth_interval, 3);
  // The third finite step completes the interval: the scale doubles, as it would have.
  optimizer.zero_grad();
  restored.scale(w.sum()).backward();
  restored.step(optimizer);
  restored.update();
  EXPECT_EQ(restored.get_scale(), 2048.0);

  GradScaler disabled({.enabled = false});
  disabled.load(in);  // a no-op, as in PyTorch
  EXPECT_EQ(disabled.get_scale(), 1.0);

  torch::serialize::OutputArchive empty_out;
  auto empty = reopened(empty_out);
  expect_error<Error>([&] { GradScaler().load(empty); }, {"GradScaler::load", "no 'scale'", "disabled GradScaler"});
}

}  // namespace
}  // namespace ddp::test
