// The main job's weights across the language line: a run under ddprun (2 ranks) starts from
// weights Python wrote (--init-from), writes model.pt and model.safetensors at the end, and
// prints the Python that loads them; that Python, run as printed, loads model.pt into net.py's
// twin, whose logits on test images equal the C++ network's bit for bit (and model.safetensors
// gives the same). Once per reference PyTorch (support/reference_pythons.h): Debian's 1.13 and PyPI's
// 2.x; where the peer has the safetensors package (PyPI's venv), the printed load_file line runs too.
// Bit for bit where the peer is the release of the linked LibTorch (the same kernels); another
// release's convolution may round differently, so there the logits agree to a tolerance (as
// tests/torch/state_dict/pytorch_peer.py's LOGITS_TOLERANCE).
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
#include "support/peer_torch.h"
#include "support/reference_pythons.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

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

class ExampleWeights : public ::testing::TestWithParam<test::ReferencePython> {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
    }
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_ = fs::temp_directory_path() / ("ddp-example-weights-" + std::to_string(::getpid()));
};

TEST_P(ExampleWeights, StartsFromPythonsWeightsAndWritesWeightsPythonLoads) {
  const std::string python = GetParam().path;
  const auto init = (root_ / "init.pt").string();
  const auto made = test::run_command({python, kPeer, "--init", init}, {}, 120s);
  ASSERT_TRUE(made.ok()) << made.output;

  // A learning rate so small that SGD leaves the weights as Python wrote them (float32 cannot
  // hold the change), while BatchNorm's statistics still move: --init-from is seen in the result.
  const auto run = test::run_command({DDPRUN, "--nproc_per_node=2", "--standalone", TRAIN_FASHION_MNIST, "--epochs",
                                      "1", "--limit-train", "128", "--limit-test", "64", "--batch-size", "32", "--lr",
                                      "1e-30", "--checkpoint-dir", (root_ / "run").string(), "--init-from", init},
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

  // The Python the run printed, as printed, then the logits. Its safetensors lines are comments that say how to
  // get the safetensors package, which Debian 12 does not package: pytorch_peer.py's reader stands in for it
  // there, and where the peer has the package, the load_file line runs as printed, uncommented.
  const auto printed = lines_after(run.output, "the model is in " + model_pt + " and " + model_st + "; in Python:", 5);
  ASSERT_EQ(printed.size(), 5u) << run.output;
  EXPECT_NE(printed[2].find("pip install safetensors"), std::string::npos) << printed[2];
  EXPECT_NE(printed[3].find("python3 -m venv --system-site-packages"), std::string::npos) << printed[3];
  EXPECT_NE(printed[4].find("load_file(\"" + model_st + "\")"), std::string::npos) << printed[4];
  std::string script = "import os; os.chdir(" + std::string("\"") + DDP_SOURCE_DIR + "\")\n";
  for (const auto& line : printed) script += line + "\n";
  script +=
      "torch.set_num_threads(1)\n"
      "sys.path.insert(0, 'tests/torch/state_dict'); from pytorch_peer import load_safetensors\n"
      "images = torch.frombuffer(bytearray(open('" +
      (root_ / "images.bin").string() +
      "', 'rb').read()), "
      "dtype=torch.float32).view(-1, 1, 28, 28)\n"
      "model.eval()\n"
      "with torch.no_grad():\n"
      "    model(images).flatten().numpy().tofile('" +
      (root_ / "logits_pt.bin").string() +
      "')\n"
      "    twin = Net(); twin.load_state_dict(load_safetensors('" +
      model_st +
      "')[0]); twin.eval()\n"
      "    twin(images).flatten().numpy().tofile('" +
      (root_ / "logits_safetensors.bin").string() +
      "')\n"
      // The printed load_file line itself, uncommented, where the safetensors package is installed.
      "import importlib.util\n"
      "if importlib.util.find_spec('safetensors'):\n"
      "    " +
      printed[4].substr(std::min(printed[4].find_first_not_of("# "), printed[4].size())) +
      "\n"
      "    with torch.no_grad(): model(images).flatten().numpy().tofile('" +
      (root_ / "logits_load_file.bin").string() +
      "')\n"
      "else:\n"
      "    print('python: no safetensors package')\n"
      "print('PyTorch', torch.__version__)\n"
      "print('python: done')\n";
  const auto run_python = test::run_command({python, "-c", script}, {}, 120s);
  ASSERT_TRUE(run_python.ok()) << run_python.output << "\n--- the script:\n" << script;
  std::vector<std::string> logits = {"logits_pt.bin", "logits_safetensors.bin"};
  if (run_python.output.find("python: no safetensors package") == std::string::npos) {
    logits.push_back("logits_load_file.bin");
  } else {
    std::cout << python << " has no safetensors package: the printed load_file line was not run\n";
  }
  const bool exact = test::runs_linked_kernels(run_python.output);
  for (const auto& name : logits) {
    const auto bytes = read_all(root_ / name);
    ASSERT_EQ(bytes.size(), expected.nbytes()) << name;
    if (exact) {
      EXPECT_EQ(std::memcmp(bytes.data(), expected.data_ptr(), bytes.size()), 0) << name << ": Python's logits differ";
    } else {
      const auto theirs = torch::from_blob(const_cast<char*>(bytes.data()), expected.sizes(), torch::kFloat);
      const double diff = (theirs - expected).abs().max().item<double>();
      EXPECT_LE(diff, 1e-6 * std::max(1.0, expected.abs().max().item<double>()))
          << name << ": Python's logits (PyTorch " << test::peer_torch_version(run_python.output) << ") differ by "
          << diff;
      std::cout << name << ": PyTorch " << test::peer_torch_version(run_python.output) << " against LibTorch "
                << TORCH_VERSION << ": logits differ by up to " << diff << "\n";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, ExampleWeights, ::testing::ValuesIn(test::reference_pythons()), test::reference_name);

}  // namespace
}  // namespace ddp
