// Weights across the language line, with PyTorch 1.13 (/usr/bin/python3) as the peer, in one run
// of pytorch_peer.py: the example's network saved by ddp in both formats loads into its Python
// twin (examples/fashion_mnist/net.py) and gives the same logits bit for bit; every dtype and
// layout reads back in Python as written; and what Python writes (zip and legacy torch.save,
// pickle protocol 4, a checkpoint dict, DDP's "module." keys, nn.Parameters, safetensors) loads
// into the C++ network and gives Python's logits bit for bit. A whole pickled model is refused
// with the way to re-save it, and a truncated legacy file is named as such.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "fashion_mnist/net.h"
#include "state_dict_support.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using test::TempDir;

const std::string kPython = "/usr/bin/python3";

void write_tensor(const std::string& path, const at::Tensor& t) {
  const auto c = t.contiguous();
  test::write_bytes(path, std::string(static_cast<const char*>(c.data_ptr()), c.nbytes()));
}

at::Tensor read_floats(const std::string& path) {
  const auto bytes = test::file_bytes(path);
  return torch::from_blob(const_cast<char*>(bytes.data()), {static_cast<std::int64_t>(bytes.size() / 4)}, torch::kFloat)
      .clone();
}

at::Tensor logits_of(Net& net, const at::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  net->eval();
  return net->forward(inputs).flatten();
}

void expect_layouts(const WeightsFile& file, const std::string& what, bool layout_kept) {
  const auto expected = test::layouts();
  ASSERT_EQ(file.tensors.keys(), expected.keys()) << what;
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

TEST(StateDictWithPyTorch, BothWaysBitForBit) {
  const auto probe = test::run_command({kPython, "-c", "import torch"}, {}, 60s);
  if (!probe.ok()) GTEST_SKIP() << "PyTorch is not importable by " << kPython << ": " << probe.output;
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
  save_state_dict(net, dir / "net.pt");
  save_state_dict(net, dir / "net.safetensors", {.format = WeightsFormat::SafeTensors});
  save_state_dict(test::layouts(), dir / "layouts.pt");
  save_state_dict(test::layouts(), dir / "layouts.safetensors",
                  {.format = WeightsFormat::SafeTensors, .metadata = {{"format", "pt"}, {"writer", "ddp"}}});

  const auto peer = test::run_command(
      {kPython, std::string(DDP_SOURCE_DIR) + "/tests/torch/state_dict/pytorch_peer.py", dir.path.string()}, {}, 180s);
  ASSERT_TRUE(peer.ok()) << peer.output;
  EXPECT_NE(peer.output.find("ok: net.pt: the twin's logits equal ddp's bit for bit"), std::string::npos) << peer.output;
  EXPECT_NE(peer.output.find("ok: net.safetensors: the twin's logits equal ddp's bit for bit"), std::string::npos);
  EXPECT_NE(peer.output.find("ok: layouts.pt: tensors that shared storage in C++ share it in Python"), std::string::npos);

  // Python -> C++: every way of saving gives Python's logits.
  const auto python_logits = read_floats(dir / "py_logits.bin");
  const std::pair<std::string, LoadOptions> files[] = {
      {"py_zip.pt", {}}, {"py_legacy.pt", {}}, {"py_protocol4.pt", {}}, {"py_net.safetensors", {}},
      {"py_checkpoint.pt", {.key = "model"}}, {"py_ddp.pt", {}}};
  for (const auto& [name, options] : files) {
    Net twin;
    const auto report = load_state_dict(twin, dir / name, options);
    EXPECT_TRUE(report.ok()) << name << "\n" << report.to_string();
    EXPECT_EQ(report.loaded, state_dict(twin).size()) << name;
    EXPECT_TRUE(torch::equal(logits_of(twin, inputs), python_logits)) << name << ": logits differ from Python's";
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
  EXPECT_EQ(read_weights(dir / "py_net.safetensors").metadata, (std::map<std::string, std::string>{{"framework", "pytorch"}}));

  // A checkpoint dict without its key says which key holds the tensors; what is not a tensor is
  // noted when the key is given.
  Net twin;
  const auto no_key = load_error(twin, dir / "py_checkpoint.pt");
  EXPECT_NE(no_key.find("the file holds a checkpoint dict (keys \"model\", \"epoch\", \"optimizer\", \"note\") whose "
                        "entry \"model\" hold"),
            std::string::npos) << no_key;
  EXPECT_NE(no_key.find(".key = \"model\""), std::string::npos) << no_key;
  const auto wrong_key = load_error(twin, dir / "py_checkpoint.pt", {.key = "epoch"});
  EXPECT_NE(wrong_key.find("the file's entry \"epoch\" is an int, not a state dict"), std::string::npos) << wrong_key;

  // torch.save(model): the whole pickled module is code, refused with the way out.
  const auto whole = load_error(twin, dir / "py_whole_model.pt");
  EXPECT_NE(whole.find("cannot read weights from \"" + (dir / "py_whole_model.pt") + "\""), std::string::npos) << whole;
  EXPECT_NE(whole.find("the pickle needs the Python object \"net.Net\", which is code, not data"), std::string::npos) << whole;
  EXPECT_NE(whole.find("torch.save(model.state_dict(), \"model.pt\")"), std::string::npos) << whole;

  // A legacy file cut short: in its storages, in its pickles.
  const auto legacy = test::file_bytes(dir / "py_legacy.pt");
  for (const std::size_t size : {legacy.size() - 1, legacy.size() - 100000, std::size_t{2000}, std::size_t{20}}) {
    test::write_bytes(dir / "cut_legacy.pt", legacy.substr(0, size));
    const auto error = load_error(twin, dir / "cut_legacy.pt");
    EXPECT_NE(error.find("truncated"), std::string::npos) << size << ": " << error;
  }
}

}  // namespace
}  // namespace ddp
