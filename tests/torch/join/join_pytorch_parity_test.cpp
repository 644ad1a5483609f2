// PyTorch's DDP with Join and ddp's, on the same uneven inputs, must end with the same model:
// pytorch_join_peer.py runs PyTorch's side (gloo, CPU); this file builds the same problems in C++.
// 2 and 3 ranks, ranks with different numbers of batches (one with none), both divisor modes, an
// unused layer, BatchNorm buffers (broadcast from the highest rank still training). Against every
// reference PyTorch (support/reference_pythons.h: Debian's 1.13, PyPI's 2.x).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "ddp/ddp.h"
#include "support/multiprocess.h"
#include "support/reference_pythons.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

struct JoinConfig {
  std::string name;
  int world;
  std::vector<int> batches;  // per rank
  bool divide_by_initial_world_size;
  bool with_unused;  // and find_unused_parameters
};

// As pytorch_join_peer.py's CONFIGS, in the same order (the index seeds the data).
const std::vector<JoinConfig> kJoinConfigs = {
    {"w2_initial", 2, {4, 2}, true, false},      {"w2_training", 2, {4, 2}, false, false},
    {"w2_none_initial", 2, {0, 3}, true, false}, {"w3_initial", 3, {3, 0, 5}, true, false},
    {"w3_training", 3, {3, 0, 5}, false, false}, {"w3_unused_training", 3, {2, 5, 1}, false, true},
};

struct Net : torch::nn::Module {
  explicit Net(bool with_unused) {
    fc1 = register_module("fc1", torch::nn::Linear(10, 16));
    bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
    if (with_unused) register_module("unused", torch::nn::Linear(16, 3));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

std::shared_ptr<Net> model(bool with_unused) {
  auto net = std::make_shared<Net>(with_unused);
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.copy_(torch::randn(p.sizes()) * 0.3);
  return net;
}

at::Tensor state_of(torch::nn::Module& net) {
  std::vector<at::Tensor> parts;
  for (auto& p : net.parameters()) parts.push_back(p.detach().flatten());
  for (auto& b : net.buffers()) parts.push_back(b.detach().to(torch::kFloat).flatten());
  return torch::cat(parts).contiguous();
}

at::Tensor read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  auto t = torch::empty({static_cast<std::int64_t>(bytes.size() / 4)}, torch::kFloat);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

class JoinPytorchParity : public ::testing::TestWithParam<ReferencePython> {};

TEST_P(JoinPytorchParity, UnevenInputsEndWithPyTorchsModelAt2And3Ranks) {
  const std::string dir = ::testing::TempDir() + "/join-parity-" + std::to_string(::getpid());
  if (!is_rank_process()) {
    std::filesystem::create_directories(dir + "/pytorch");
    std::filesystem::create_directories(dir + "/ddp");
    const std::string script = std::string(DDP_SOURCE_DIR) + "/tests/torch/join/pytorch_join_peer.py";
    const auto peer = run_command({GetParam().path, script, "--out", dir + "/pytorch"}, {}, 240s);
    ASSERT_TRUE(peer.ok()) << peer.output;
  }
  run_ranks(
      3,
      [](int rank, int) {
    const std::string dir = std::getenv("JOIN_PARITY_DIR");  // the parent's (its pid names it)
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto pair = new_group({0, 1});
    for (std::size_t c = 0; c < kJoinConfigs.size(); ++c) {
      const auto& config = kJoinConfigs[c];
      if (config.world == 2 && rank == 2) continue;
      auto net = model(config.with_unused);
      DistributedDataParallel ddp_model(
          net, {.process_group = config.world == 2 ? pair : nullptr, .find_unused_parameters = config.with_unused});
      torch::optim::SGD optimizer(ddp_model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      join(
          {&ddp_model},
          [&] {
        for (int step = 0; step < config.batches[rank]; ++step) {
          torch::manual_seed(5000 + 100 * static_cast<int>(c) + 10 * rank + step);
          auto x = torch::randn({4 + rank, 10});
          auto y = torch::randn({4 + rank, 3});
          optimizer.zero_grad();
          (ddp_model->forward(x) - y).pow(2).mean().backward();
          optimizer.step();
        }
          },
          {.divide_by_initial_world_size = config.divide_by_initial_world_size});
      // Every rank ends with the same model (the last to join broadcast it), written by each.
      const auto state = state_of(*net);
      std::ofstream(dir + "/ddp/" + config.name + "." + std::to_string(rank) + ".bin", std::ios::binary)
          .write(static_cast<const char*>(state.data_ptr()), static_cast<std::streamsize>(state.nbytes()));
    }
    barrier();
    destroy_process_group();
      },
      {.env = {{"JOIN_PARITY_DIR", dir}}});
  if (is_rank_process()) return;
  double worst = 0;
  for (const auto& config : kJoinConfigs) {
    const auto theirs = read_floats(dir + "/pytorch/" + config.name + ".bin");
    for (int rank = 0; rank < config.world; ++rank) {
      const auto ours = read_floats(dir + "/ddp/" + config.name + "." + std::to_string(rank) + ".bin");
      ASSERT_EQ(ours.numel(), theirs.numel()) << config.name << ", rank " << rank;
      const double diff = (ours - theirs).abs().max().item<double>();
      EXPECT_LE(diff, 1e-6 * std::max(1.0, theirs.abs().max().item<double>()))
          << config.name << ", rank " << rank << ": ddp and PyTorch differ by up to " << diff;
      worst = std::max(worst, diff);
    }
  }
  std::cout << "largest difference from PyTorch " << GetParam().name << ": " << worst << "\n";
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, JoinPytorchParity, ::testing::ValuesIn(reference_pythons()), reference_name);

}  // namespace
}  // namespace ddp::test
