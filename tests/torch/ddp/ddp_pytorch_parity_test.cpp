// PyTorch's own DDP and ddp's, on the same problem, must end with the same bits: parameters after
// 3 SGD steps and the last averaged gradients. pytorch_ddp_peer.py runs PyTorch's side (gloo);
// this file builds the same model, data and loop in C++. At 2 ranks every average is
// (g0 * 0.5) + (g1 * 0.5) on both sides, whatever the all-reduce's algorithm, so any difference is
// a difference in DDP's arithmetic (more ranks would add the all-reduce's summation order).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "ddp/ddp.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

const std::string kPython = "/usr/bin/python3";

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

class DdpPytorchParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(DdpPytorchParity, ParametersAndGradientsMatchPyTorchsDdpBitForBit) {
  const std::string dir = ::testing::TempDir() + "/parity-" + std::to_string(::getpid());
  const std::string theirs_path = dir + "-pytorch.bin", ours_path = dir + "-ddp.bin";
  if (!is_rank_process()) {
    const auto probe = run_command({kPython, "-c", "import torch.distributed"}, {}, 60s);
    if (!probe.ok()) GTEST_SKIP() << "PyTorch is not importable by " << kPython << ": " << probe.output;
    std::vector<std::string> command = {kPython, std::string(DDP_SOURCE_DIR) + "/tests/torch/ddp/pytorch_ddp_peer.py",
                                        "--world", "2", "--out", theirs_path};
    if (GetParam().bucket_view) command.push_back("--bucket-view");
    const auto peer = run_command(command, {}, 180s);
    ASSERT_TRUE(peer.ok()) << peer.output;
  }
  run_ranks(2, [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    auto net = model();
    DistributedDataParallel ddp_model(net, {.gradient_as_bucket_view = GetParam().bucket_view});
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
  }, {.env = {{"DDP_SHM", GetParam().shm}, {"PARITY_OUT", ours_path}}});
  if (is_rank_process()) return;
  const auto theirs = read_all(theirs_path), ours = read_all(ours_path);
  ::unlink(theirs_path.c_str());
  ::unlink(ours_path.c_str());
  ASSERT_EQ(ours.size(), theirs.size()) << "ddp wrote " << ours.size() << " bytes, PyTorch " << theirs.size();
  const std::size_t params = 20 * 64 + 64 + 64 * 5 + 5;
  for (std::size_t i = 0; i < ours.size() / 4; ++i) {
    float a, b;
    std::memcpy(&a, ours.data() + 4 * i, 4);
    std::memcpy(&b, theirs.data() + 4 * i, 4);
    ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << (i < params ? "parameter" : "gradient") << " element "
                                         << (i < params ? i : i - params) << ": ddp " << a << ", PyTorch " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DdpPytorchParity,
                         ::testing::Values(ParityCase{"1", false}, ParityCase{"0", false}, ParityCase{"1", true},
                                           ParityCase{"0", true}),
                         [](const auto& info) {
                           return std::string(std::string(info.param.shm) == "1" ? "SharedMemory" : "PlainGloo") +
                                  (info.param.bucket_view ? "BucketView" : "");
                         });

}  // namespace
}  // namespace ddp::test
