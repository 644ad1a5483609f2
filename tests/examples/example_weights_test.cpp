// The main job's weights across the language line: a run under ddprun (2 ranks) starts from
// weights Python wrote (--init-from), writes model.pt and model.safetensors at the end, and
// prints the Python that loads them; that Python, run as printed, loads model.pt into net.py's
// twin, whose logits on test images equal the C++ network's bit for bit (and model.safetensors
// gives the same).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ddp/ddp.h"
#include "fashion_mnist/net.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kPython = "/usr/bin/python3";
const std::string kPeer = std::string(DDP_SOURCE_DIR) + "/tests/torch/state_dict/pytorch_peer.py";

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The lines of `output` that follow its line containing `marker`, without ddprun's "[0]:" prefix.
std::vector<std::string> lines_after(const std::string& output, const std::string& marker, std::size_t count) {
  std::vector<std::string> out;
  std::istringstream in(output);
  bool found = false;
  for (std::string line; std::getline(in, line) && out.size() < count;) {
    if (found) {
      line = line.substr(line.find(':') + 1);
      out.push_back(line.substr(std::min(line.find_first_not_of(' '), line.size())));
    }
    if (line.find(marker) != std::string::npos) found = true;
  }
  return out;
}

class ExampleWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
    }
    if (!test::run_command({kPython, "-c", "import torch"}, {}, 60s).ok()) GTEST_SKIP() << "no PyTorch in " << kPython;
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_ = fs::temp_directory_path() / ("ddp-example-weights-" + std::to_string(::getpid()));
};

TEST_F(ExampleWeights, StartsFromPythonsWeightsAndWritesWeightsPythonLoads) {
  const auto init = (root_ / "init.pt").string();
  const auto made = test::run_command({kPython, kPeer, "--init", init}, {}, 120s);
  ASSERT_TRUE(made.ok()) << made.output;

  // A learning rate so small that SGD leaves the weights as Python wrote them (float32 cannot
  // hold the change), while BatchNorm's statistics still move: --init-from is seen in the result.
  const auto run = test::run_command({DDPRUN, "--nproc_per_node=2", "--standalone", TRAIN_FASHION_MNIST, "--epochs", "1",
                                      "--limit-train", "128", "--limit-test", "64", "--batch-size", "32", "--lr", "1e-30",
                                      "--checkpoint-dir", (root_ / "run").string(), "--init-from", init},
                                     {}, 240s);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("[0]:initialized from " + init + " (PyTorch legacy, 18 tensors)"), std::string::npos)
      << run.output;
  const auto model_pt = (root_ / "run" / "model.pt").string();
  const auto model_st = (root_ / "run" / "model.safetensors").string();
  ASSERT_TRUE(fs::exists(model_pt) && fs::exists(model_st)) << run.output;

  // The final network, read from the run's own checkpoint (torch::serialize, not the weight files).
  Net net;
  ASSERT_TRUE(Checkpoints({.directory = (root_ / "run").string()}).load_latest([&](torch::serialize::InputArchive& a) {
    torch::serialize::InputArchive m;
    a.read("model", m);
    net->load(m);
  }));
  const auto python_init = read_weights(init).tensors;
  for (const auto& p : net->named_parameters()) {
    EXPECT_TRUE(torch::allclose(p.value(), python_init[p.key()], 0, 1e-20)) << p.key() << " is not Python's";
  }
  EXPECT_FALSE(torch::equal(net->bn1->running_mean, python_init["bn1.running_mean"])) << "BatchNorm did not train";

  // The test images and the C++ logits, for Python.
  torch::set_num_threads(1);  // as the peer: the same kernels on the same partition of the work
  const data::FashionMNIST test_set(data::FashionMNIST::kDefaultRoot, data::FashionMNIST::Mode::kTest);
  const auto images = test_set.images().narrow(0, 0, 64).contiguous();
  std::ofstream(root_ / "images.bin", std::ios::binary)
      .write(static_cast<const char*>(images.data_ptr()), static_cast<std::streamsize>(images.nbytes()));
  at::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    net->eval();
    expected = net->forward(images).flatten().contiguous();
  }

  // The Python the run printed, as printed (its safetensors line needs the safetensors package,
  // which is not installed here: pytorch_peer.py's reader stands in for it), then the logits.
  const auto printed = lines_after(run.output, "the model is in " + model_pt + " and " + model_st + "; in Python:", 3);
  ASSERT_EQ(printed.size(), 3u) << run.output;
  EXPECT_NE(printed[2].find("load_file(\"" + model_st + "\")"), std::string::npos) << printed[2];
  const std::string script =
      "import os; os.chdir(" + std::string("\"") + DDP_SOURCE_DIR + "\")\n" + printed[0] + "\n" + printed[1] + "\n" +
      "torch.set_num_threads(1)\n"
      "sys.path.insert(0, 'tests/torch/state_dict'); from pytorch_peer import load_safetensors\n"
      "images = torch.frombuffer(bytearray(open('" + (root_ / "images.bin").string() + "', 'rb').read()), "
      "dtype=torch.float32).view(-1, 1, 28, 28)\n"
      "model.eval()\n"
      "with torch.no_grad():\n"
      "    model(images).flatten().numpy().tofile('" + (root_ / "logits_pt.bin").string() + "')\n"
      "    twin = Net(); twin.load_state_dict(load_safetensors('" + model_st + "')[0]); twin.eval()\n"
      "    twin(images).flatten().numpy().tofile('" + (root_ / "logits_safetensors.bin").string() + "')\n"
      "print('python: done')\n";
  const auto python = test::run_command({kPython, "-c", script}, {}, 120s);
  ASSERT_TRUE(python.ok()) << python.output << "\n--- the script:\n" << script;
  for (const auto* name : {"logits_pt.bin", "logits_safetensors.bin"}) {
    const auto bytes = read_all(root_ / name);
    ASSERT_EQ(bytes.size(), expected.nbytes()) << name;
    EXPECT_EQ(std::memcmp(bytes.data(), expected.data_ptr(), bytes.size()), 0) << name << ": Python's logits differ";
  }
}

}  // namespace
}  // namespace ddp
