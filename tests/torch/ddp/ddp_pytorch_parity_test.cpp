// PyTorch's own DDP and ddp's, on the same problem, must end with the same bits: parameters after
// 3 SGD steps and the last averaged gradients. pytorch_ddp_peer.py runs PyTorch's side (gloo);
// this file builds the same model, data and loop in C++. At 2 ranks every average is
// (g0 * 0.5) + (g1 * 0.5) on both sides, whatever the all-reduce's algorithm, so any difference is
// a difference in DDP's arithmetic (more ranks would add the all-reduce's summation order). Against
// every reference PyTorch (support/reference_pythons.h: Debian's 1.13, PyPI's 2.x): bit for bit with
// the release of the linked LibTorch; another release's matmul kernels round differently in the last
// bits (kAcrossReleases).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <tuple>

#include <unistd.h>

#include "ddp/ddp.h"
#include "support/multiprocess.h"
#include "support/peer_torch.h"
#include "support/reference_pythons.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

// Relative to max(1, |PyTorch's value|), for a peer of another release than the linked LibTorch. Measured
// here, LibTorch 1.13 against PyTorch 2.15 (as PyTorch 1.13 against 2.15): up to 2.4e-7, a few float32 ulps.
constexpr double kAcrossReleases = 1e-6;

torch::nn::Sequential model() {
  torch::nn::Sequential net(torch::nn::Linear(20, 64), torch::nn::ReLU(), torch::nn::Linear(64, 5));
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.copy_(torch::randn(p.sizes()) * 0.3);
  return net;
}

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// DDP_SHM's value, and whether both sides use gradient_as_bucket_view (PyTorch then divides each
// gradient in place, ddp's all-reduce scales the sum: the same bits at 2 ranks).
struct ParityCase {
  const char* shm;
  bool bucket_view;
};

class DdpPytorchParity : public ::testing::TestWithParam<std::tuple<ReferencePython, ParityCase>> {
 protected:
  static const ParityCase& parity() { return std::get<1>(GetParam()); }
};

TEST_P(DdpPytorchParity, ParametersAndGradientsMatchPyTorchsDdpBitForBit) {
  const std::string dir = ::testing::TempDir() + "/parity-" + std::to_string(::getpid());
  const std::string theirs_path = dir + "-pytorch.bin", ours_path = dir + "-ddp.bin";
  bool exact = true;
  if (!is_rank_process()) {
    std::vector<std::string> command = {std::get<0>(GetParam()).path,
                                        std::string(DDP_SOURCE_DIR) + "/tests/torch/ddp/pytorch_ddp_peer.py",
                                        "--world",
                                        "2",
                                        "--out",
                                        theirs_path};
    if (parity().bucket_view) command.push_back("--bucket-view");
    const auto peer = run_command(command, {}, 180s);
    ASSERT_TRUE(peer.ok()) << peer.output;
    exact = runs_linked_kernels(peer.output);
  }
  run_ranks(
      2,
      [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto net = model();
    DistributedDataParallel ddp_model(net, {.gradient_as_bucket_view = parity().bucket_view});
    torch::optim::SGD optimizer(ddp_model->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(1000 + 17 * rank + step);
      auto x = torch::randn({8, 20});
      auto y = torch::randn({8, 5});
      optimizer.zero_grad();
      (ddp_model->forward(x) - y).pow(2).mean().backward();
      optimizer.step();
    }
    if (rank != 0) return;
    std::vector<at::Tensor> parts;
    for (auto& p : net->parameters()) parts.push_back(p.detach().flatten());
    for (auto& p : net->parameters()) parts.push_back(p.grad().flatten());
    auto all = torch::cat(parts).contiguous();
    std::ofstream(std::getenv("PARITY_OUT"), std::ios::binary)
        .write(static_cast<const char*>(all.data_ptr()), static_cast<std::streamsize>(all.nbytes()));
      },
      {.env = {{"DDP_SHM", parity().shm}, {"PARITY_OUT", ours_path}}});
  if (is_rank_process()) return;
  const auto theirs = read_all(theirs_path), ours = read_all(ours_path);
  ::unlink(theirs_path.c_str());
  ::unlink(ours_path.c_str());
  ASSERT_EQ(ours.size(), theirs.size()) << "ddp wrote " << ours.size() << " bytes, PyTorch " << theirs.size();
  const std::size_t params = 20 * 64 + 64 + 64 * 5 + 5;
  double worst = 0;
  for (std::size_t i = 0; i < ours.size() / 4; ++i) {
    float a, b;
    std::memcpy(&a, ours.data() + 4 * i, 4);
    std::memcpy(&b, theirs.data() + 4 * i, 4);
    const double diff = std::abs(double(a) - double(b)) / std::max(1.0, std::abs(double(b)));
    worst = std::max(worst, diff);
    if (exact) {
      ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << (i < params ? "parameter" : "gradient") << " element "
                                           << (i < params ? i : i - params) << ": ddp " << a << ", PyTorch " << b;
    } else {
      ASSERT_LE(diff, kAcrossReleases) << (i < params ? "parameter" : "gradient") << " element "
                                       << (i < params ? i : i - params) << ": ddp " << a << ", PyTorch " << b;
    }
  }
  if (!exact) {
    std::cout << "another release than LibTorch " TORCH_VERSION ": largest relative difference " << worst << "\n";
  }
}

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << "DDP_SHM=" << c.shm << (c.bucket_view ? ", bucket view" : "");
}

INSTANTIATE_TEST_SUITE_P(Backends, DdpPytorchParity,
                         ::testing::Combine(::testing::ValuesIn(reference_pythons()),
                                            ::testing::Values(ParityCase{"1", false}, ParityCase{"0", false},
                                                              ParityCase{"1", true}, ParityCase{"0", true})),
                         [](const auto& info) {
  const ParityCase& parity = std::get<1>(info.param);
  return std::string(std::string(parity.shm) == "1" ? "SharedMemory" : "PlainGloo") +
         (parity.bucket_view ? "BucketView" : "") + "_" + std::get<0>(info.param).name;
});

}  // namespace
}  // namespace ddp::test
