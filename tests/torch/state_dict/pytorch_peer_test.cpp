// Weights across the language line, with every reference PyTorch as the peer (Debian's 1.13, PyPI's
// 2.x: support/reference_pythons.h), in one run of pytorch_peer.py each: the example's network saved
// by ddp in both formats loads into its Python twin (examples/fashion_mnist/net.py; the .pt through
// torch.load(weights_only=True)) with every tensor bit for bit, and gives the same logits; every dtype
// and layout reads back in Python as written; and what Python writes (zip and legacy torch.save, pickle
// protocol 4, a checkpoint dict, DDP's "module." keys, nn.Parameters, safetensors) loads into the C++
// network bit for bit and gives Python's logits. The logits agree bit for bit where the peer is the
// release of the linked LibTorch (the same kernels), else to pytorch_peer.py's LOGITS_TOLERANCE (another
// release's convolution may round differently). Where the peer has the safetensors package (PyPI's venv; Debian
// 12 has none, so its peer skips this part and says so), ddp's .safetensors files also go through
// safetensors.torch.load_file, and save_file's files load in ddp. A whole pickled model is refused
// with the way to re-save it, and a truncated legacy file is named as such.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <sstream>

#include "ddp/ddp.h"
#include "fashion_mnist/net.h"
#include "state_dict_support.h"
#include "support/multiprocess.h"
#include "support/peer_torch.h"
#include "support/reference_pythons.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using test::TempDir;

// For a peer of another release than the linked LibTorch, relative to max(1, the largest logit): as
// pytorch_peer.py's LOGITS_TOLERANCE (measured: up to 1.2e-7, LibTorch 1.13 against PyTorch 2.15).
constexpr double kLogitsAcrossReleases = 1e-6;

void write_tensor(const std::string& path, const at::Tensor& t) {
  const auto c = t.contiguous();
  test::write_bytes(path, std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
}

at::Tensor read_floats(const std::string& path) {
  const auto bytes = test::file_bytes(path);
  return torch::from_blob(const_cast<char*>(bytes.data()), {static_cast<std::int64_t>(bytes.size() / 4)}, torch::kFloat)
      .clone();
}

// The state dict's tensors' bytes, in order (as pytorch_peer.py's state_bytes): equal whatever the kernels.
std::string state_bytes(Net& net) {
  std::string out;
  for (const auto& item : state_dict(net)) {
    const auto c = item.value().contiguous();
    out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

at::Tensor logits_of(Net& net, const at::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  net->eval();
  return net->forward(inputs).flatten();
}

// `order_kept`: the file holds the tensors in layouts()'s order (safetensors' own writer sorts them).
void expect_layouts(const WeightsFile& file, const std::string& what, bool layout_kept, bool order_kept = true) {
  const auto expected = test::layouts();
  auto keys = file.tensors.keys(), expected_keys = expected.keys();
  if (!order_kept) {
    std::sort(keys.begin(), keys.end());
    std::sort(expected_keys.begin(), expected_keys.end());
  }
  ASSERT_EQ(keys, expected_keys) << what;
  for (const auto& item : expected) {
    const auto& t = file.tensors[item.key()];
    EXPECT_EQ(t.scalar_type(), item.value().scalar_type()) << what << " " << item.key();
    EXPECT_TRUE(torch::equal(t, item.value())) << what << " " << item.key();
    if (layout_kept) {
      EXPECT_EQ(t.strides(), item.value().strides()) << what << " " << item.key();
    }
  }
  if (layout_kept) {
    EXPECT_EQ(file.tensors["shared.a"].data_ptr(), file.tensors["shared.b"].data_ptr()) << what;
  }
}

std::string load_error(Net& net, const std::string& path, const LoadOptions& options = {}) {
  try {
    load_state_dict(net, path, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class StateDictWithPyTorch : public ::testing::TestWithParam<test::ReferencePython> {};

TEST_P(StateDictWithPyTorch, BothWaysBitForBit) {
  TempDir dir;
  torch::set_num_threads(1);  // as the peer: the same kernels on the same partition of the work

  // C++ -> Python: the example's network with BatchNorm statistics that are not the defaults.
  torch::manual_seed(3);
  Net net;
  {
    torch::NoGradGuard no_grad;
    for (auto* bn : {&net->bn1, &net->bn2}) {
      (*bn)->running_mean.uniform_(-0.5, 0.5);
      (*bn)->running_var.uniform_(0.5, 2.0);
      (*bn)->num_batches_tracked.fill_(9);
    }
  }
  const auto inputs = torch::randn({16, 1, 28, 28});
  write_tensor(dir / "inputs.bin", inputs);
  write_tensor(dir / "cpp_logits.bin", logits_of(net, inputs));
  test::write_bytes(dir / "cpp_state.bin", state_bytes(net));
  save_state_dict(net, dir / "net.pt");
  save_state_dict(net, dir / "net.safetensors", {.format = WeightsFormat::SafeTensors});
  save_state_dict(test::layouts(), dir / "layouts.pt");
  save_state_dict(test::layouts(), dir / "layouts.safetensors",
                  {.format = WeightsFormat::SafeTensors, .metadata = {{"format", "pt"}, {"writer", "ddp"}}});

  const auto peer = test::run_command(
      {GetParam().path, std::string(DDP_SOURCE_DIR) + "/tests/torch/state_dict/pytorch_peer.py", dir.path()},
      {{"DDP_LIBTORCH_VERSION", TORCH_VERSION}}, 180s);
  ASSERT_TRUE(peer.ok()) << peer.output;
  const bool exact = test::runs_linked_kernels(peer.output);
  std::cout << "PyTorch " << test::peer_torch_version(peer.output) << ", LibTorch " << TORCH_VERSION << ": logits "
            << (exact ? "bit for bit" : "within a tolerance") << "\n";
  std::istringstream peer_lines(peer.output);
  for (std::string line; std::getline(peer_lines, line);) {
    if (line.find("equal ddp's to ") != std::string::npos) std::cout << "  " << line << "\n";  // what it measured
  }
  for (const std::string name : {"net.pt", "net.safetensors"}) {
    EXPECT_NE(peer.output.find("ok: " + name + ": the twin's tensors equal ddp's bit for bit"), std::string::npos)
        << peer.output;
    EXPECT_NE(peer.output.find("ok: " + name + ": the twin's logits equal ddp's" + (exact ? " bit for bit" : " to ")),
              std::string::npos)
        << peer.output;
  }
  EXPECT_NE(peer.output.find("ok: layouts.pt: tensors that shared storage in C++ share it in Python"),
            std::string::npos);
  // The safetensors package, where the peer has it (a sub-check, not a promise of the configuration).
  const bool has_safetensors = peer.output.find("skipped: no safetensors package") == std::string::npos;
  if (has_safetensors) {
    EXPECT_NE(peer.output.find("load_file gives the twin ddp's tensors bit for bit"), std::string::npos) << peer.output;
    EXPECT_NE(peer.output.find("ok: layouts.safetensors: safe_open's metadata"), std::string::npos) << peer.output;
  } else {
    std::cout << GetParam().path
              << " has no safetensors package: ddp's files were read by pytorch_peer.py's reader "
                 "only, and no file of safetensors' own writer was read\n";
  }

  // Python -> C++: every way of saving gives Python's tensors, and its logits (bit for bit with the same kernels).
  const auto python_logits = read_floats(dir / "py_logits.bin");
  const auto python_state = test::file_bytes(dir / "py_state.bin");
  const std::pair<std::string, LoadOptions> files[] = {{"py_zip.pt", {}},
                                                       {"py_legacy.pt", {}},
                                                       {"py_protocol4.pt", {}},
                                                       {"py_net.safetensors", {}},
                                                       {"py_checkpoint.pt", {.key = "model"}},
                                                       {"py_ddp.pt", {}}};
  std::vector<std::pair<std::string, LoadOptions>> written(std::begin(files), std::end(files));
  if (has_safetensors) written.push_back({"st_net.safetensors", {}});  // safetensors.torch.save_file's
  for (const auto& [name, options] : written) {
    Net twin;
    const auto report = load_state_dict(twin, dir / name, options);
    EXPECT_TRUE(report.ok()) << name << "\n" << report.to_string();
    EXPECT_EQ(report.loaded, state_dict(twin).size()) << name;
    EXPECT_TRUE(state_bytes(twin) == python_state) << name << ": the tensors differ from Python's";
    const auto logits = logits_of(twin, inputs);
    if (exact) {
      EXPECT_TRUE(torch::equal(logits, python_logits)) << name << ": logits differ from Python's";
    } else {
      const double diff = (logits - python_logits).abs().max().item<double>();
      EXPECT_LE(diff, kLogitsAcrossReleases * std::max(1.0, python_logits.abs().max().item<double>()))
          << name << ": logits differ from Python's by " << diff;
      std::cout << "  " << name << ": the logits equal Python's to " << diff << "\n";
    }
    if (name == "py_ddp.pt") {
      EXPECT_NE(report.to_string().find("stripped DDP's \"module.\" prefix"), std::string::npos);
    }
    if (name == "py_legacy.pt") {
      EXPECT_EQ(report.format, "PyTorch legacy");
    }
  }
  // nn.Parameters (torch._utils._rebuild_parameter) load as tensors; the buffers are missing.
  Net parameters_only;
  const auto partial = load_state_dict(parameters_only, dir / "py_parameters.pt", {.strict = false});
  EXPECT_EQ(partial.loaded, parameters_only->parameters().size());
  EXPECT_EQ(partial.missing_keys.size(), 6u) << partial.to_string();  // 3 BatchNorm buffers x 2
  EXPECT_TRUE(partial.unexpected_keys.empty());

  expect_layouts(read_weights(dir / "py_layouts.pt"), "py_layouts.pt", true);
  expect_layouts(read_weights(dir / "py_layouts_legacy.pt"), "py_layouts_legacy.pt", true);
  expect_layouts(read_weights(dir / "py_layouts.safetensors"), "py_layouts.safetensors", false);
  EXPECT_EQ(read_weights(dir / "py_net.safetensors").metadata,
            (std::map<std::string, std::string>{{"framework", "pytorch"}}));
  if (has_safetensors) {
    expect_layouts(read_weights(dir / "st_layouts.safetensors"), "st_layouts.safetensors", false, false);
    EXPECT_EQ(read_weights(dir / "st_net.safetensors").metadata,
              (std::map<std::string, std::string>{{"writer", "safetensors"}}));
  }

  // A checkpoint dict without its key says which key holds the tensors; what is not a tensor is
  // noted when the key is given.
  Net twin;
  const auto no_key = load_error(twin, dir / "py_checkpoint.pt");
  EXPECT_NE(no_key.find("the file holds a checkpoint dict (keys \"model\", \"epoch\", \"optimizer\", \"note\") whose "
                        "entry \"model\" hold"),
            std::string::npos)
      << no_key;
  EXPECT_NE(no_key.find(".key = \"model\""), std::string::npos) << no_key;
  const auto wrong_key = load_error(twin, dir / "py_checkpoint.pt", {.key = "epoch"});
  EXPECT_NE(wrong_key.find("the file's entry \"epoch\" is an int, not a state dict"), std::string::npos) << wrong_key;

  // torch.save(model): the whole pickled module is code, refused with the way out.
  const auto whole = load_error(twin, dir / "py_whole_model.pt");
  EXPECT_NE(whole.find("cannot read weights from \"" + (dir / "py_whole_model.pt") + "\""), std::string::npos) << whole;
  EXPECT_NE(whole.find("the pickle needs the Python object \"net.Net\", which is code, not data"), std::string::npos)
      << whole;
  EXPECT_NE(whole.find("torch.save(model.state_dict(), \"model.pt\")"), std::string::npos) << whole;

  // A legacy file cut short: in its storages, in its pickles.
  const auto legacy = test::file_bytes(dir / "py_legacy.pt");
  for (const std::size_t size : {legacy.size() - 1, legacy.size() - 100000, std::size_t{2000}, std::size_t{20}}) {
    test::write_bytes(dir / "cut_legacy.pt", legacy.substr(0, size));
    const auto error = load_error(twin, dir / "cut_legacy.pt");
    EXPECT_NE(error.find("truncated"), std::string::npos) << size << ": " << error;
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, StateDictWithPyTorch, ::testing::ValuesIn(test::reference_pythons()),
                         test::reference_name);

}  // namespace
}  // namespace ddp
