// ddp::state_dict, save_state_dict and load_state_dict in C++ alone: PyTorch's names, round trips
// of every dtype and layout in both formats, the report of a file that does not fit, the errors of
// files that are not what they should be, and the DDP save (rank 0 writes, everyone waits).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "ddp/ddp.h"
#include "state_dict_support.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::TempDir;

// A module with its own parameter and buffer and nested children, as Python would define it.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    scale = register_parameter("scale", torch::ones({4}));
    register_buffer("steps", torch::zeros({}, torch::kLong));
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    heads = register_module("heads", torch::nn::ModuleList(torch::nn::Linear(4, 2), torch::nn::Linear(4, 3)));
  }
  at::Tensor scale;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::ModuleList heads{nullptr};
};
TORCH_MODULE(Block);

std::vector<std::string> keys(const StateDict& d) { return d.keys(); }

template <typename F>
std::string what_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(StateDict, HasPyTorchsNamesInPyTorchsOrder) {
  Block block;
  // What Python's state_dict() gives the same module: own parameters, own buffers, then each
  // child in registration order; BatchNorm's num_batches_tracked; no bias for bias=False.
  EXPECT_EQ(keys(state_dict(block)),
            (std::vector<std::string>{"scale", "steps", "conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                                      "bn.running_var", "bn.num_batches_tracked", "heads.0.weight", "heads.0.bias",
                                      "heads.1.weight", "heads.1.bias"}));
  auto d = state_dict(block);
  EXPECT_FALSE(d["conv.weight"].requires_grad());
  EXPECT_EQ(d["conv.weight"].data_ptr(), block->conv->weight.data_ptr()) << "the tensors share the module's storage";
  EXPECT_EQ(
      keys(state_dict(torch::nn::Sequential(torch::nn::Linear(2, 3), torch::nn::ReLU(), torch::nn::Linear(3, 1)))),
      (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
}

void expect_same(const StateDict& expected, const StateDict& got, bool layout_kept) {
  ASSERT_EQ(keys(got), keys(expected));
  for (const auto& item : expected) {
    const auto& t = got[item.key()];
    EXPECT_EQ(t.scalar_type(), item.value().scalar_type()) << item.key();
    EXPECT_EQ(t.sizes(), item.value().sizes()) << item.key();
    EXPECT_TRUE(torch::equal(t, item.value())) << item.key();
    if (layout_kept) {
      EXPECT_EQ(t.strides(), item.value().strides()) << item.key();
    }
  }
}

TEST(StateDict, EveryDtypeAndLayoutRoundTripsInBothFormats) {
  TempDir dir;
  const auto original = test::layouts();
  save_state_dict(original, dir / "all.pt");
  save_state_dict(original, dir / "all.safetensors",
                  {.format = WeightsFormat::SafeTensors, .metadata = {{"format", "pt"}, {"epoch", "3"}}});

  const auto pt = read_weights(dir / "all.pt");
  EXPECT_EQ(pt.format, "PyTorch zip");
  expect_same(original, pt.tensors, /*layout_kept=*/true);
  // Storage shared in memory is shared in the file, and again after reading, as with torch.save.
  EXPECT_EQ(pt.tensors["shared.a"].data_ptr(), pt.tensors["shared.b"].data_ptr());
  EXPECT_EQ(pt.tensors["transposed"].storage().unsafeGetStorageImpl(),
            pt.tensors["shared.a"].storage().unsafeGetStorageImpl());
  EXPECT_EQ(pt.tensors["slice"].storage_offset(), 5);

  const auto st = read_weights(dir / "all.safetensors");
  EXPECT_EQ(st.format, "safetensors");
  expect_same(original, st.tensors, /*layout_kept=*/false);
  EXPECT_TRUE(st.tensors["transposed"].is_contiguous());
  EXPECT_EQ(st.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"epoch", "3"}}));

  // Each entry's data starts at a multiple of 64 bytes, as in PyTorch's archives: the local
  // headers (signature, sizes at 18, name and extra lengths at 26 and 28) say where.
  const auto bytes = test::file_bytes(dir / "all.pt");
  auto u16 = [&](std::size_t at) {
    return static_cast<std::size_t>(static_cast<unsigned char>(bytes[at]) | static_cast<unsigned char>(bytes[at + 1])
                                                                                << 8);
  };
  std::size_t entries = 0;
  for (std::size_t at = 0; bytes.compare(at, 4, "PK\x03\x04") == 0; ++entries) {
    const std::size_t data = at + 30 + u16(at + 26) + u16(at + 28);
    EXPECT_EQ(data % 64, 0u) << "entry " << bytes.substr(at + 30, u16(at + 26));
    at = data + (u16(at + 18) | u16(at + 20) << 16);
  }
  // data.pkl, byteorder, version and 15 storages: one per dtype, then those of the shared base
  // (transposed, shared.a, shared.b), the slice, the expanded tensor, the empty one, the scalar.
  EXPECT_EQ(entries, 3u + 15u);

  // The same tensors give the same bytes (no timestamps, no addresses).
  save_state_dict(original, dir / "again.pt");
  EXPECT_EQ(test::file_bytes(dir / "again.pt"), test::file_bytes(dir / "all.pt"));
}

TEST(StateDict, LoadsIntoAModuleOnItsDeviceAndTypeWithoutGradients) {
  TempDir dir;
  torch::manual_seed(1);
  Block source;
  {
    torch::NoGradGuard no_grad;
    source->bn->running_mean.uniform_();
    source->bn->num_batches_tracked.fill_(7);
  }
  save_state_dict(source, dir / "block.pt");
  save_state_dict(source, dir / "block.safetensors", {.format = WeightsFormat::SafeTensors});
  for (const auto* name : {"block.pt", "block.safetensors"}) {
    torch::manual_seed(2);
    Block target;
    auto report = load_state_dict(target, dir / name);
    EXPECT_TRUE(report.ok()) << report.to_string();
    EXPECT_EQ(report.loaded, 12u);
    EXPECT_TRUE(report.notes.empty()) << report.to_string();
    expect_same(state_dict(source), state_dict(target), false);
    EXPECT_TRUE(target->scale.requires_grad()) << "parameters stay parameters";
    EXPECT_FALSE(target->scale.grad_fn()) << "loading is not recorded by autograd";
  }
  // A file of doubles loads into the float module, converted, with a note for each tensor.
  auto doubles = state_dict(source);
  StateDict as_double;
  for (const auto& item : doubles) {
    as_double.insert(item.key(),
                     at::isFloatingType(item.value().scalar_type()) ? item.value().to(torch::kDouble) : item.value());
  }
  save_state_dict(as_double, dir / "double.pt");
  Block target;
  auto report = load_state_dict(target, dir / "double.pt");
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.notes.size(), 10u) << report.to_string();
  EXPECT_NE(report.to_string().find("note: \"conv.weight\": float64 in the file, converted to float32"),
            std::string::npos)
      << report.to_string();
  EXPECT_EQ(target->conv->weight.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(target->conv->weight, as_double["conv.weight"].to(torch::kFloat)));
}

TEST(StateDict, AFileThatDoesNotFitIsReportedByNameAndStrictLoadsNothing) {
  TempDir dir;
  Block source;
  auto d = state_dict(source);
  StateDict file;
  for (const auto& item : d) {
    if (item.key() == "bn.running_var") continue;                                       // missing
    if (item.key() == "heads.1.weight") file.insert(item.key(), torch::zeros({5, 4}));  // other shape
    else file.insert(item.key(), item.value() + 1);
  }
  file.insert("heads.2.weight", torch::zeros({1, 4}));  // unexpected
  save_state_dict(file, dir / "other.pt");

  Block target;
  const auto before = state_dict(target)["scale"].clone();
  const auto error = what_of([&] { load_state_dict(target, dir / "other.pt"); });
  EXPECT_NE(error.find("load_state_dict: \"" + (dir / "other.pt") +
                       "\" (PyTorch zip) does not match the module; nothing was loaded"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("missing keys (in the module, not in the file): \"bn.running_var\""), std::string::npos)
      << error;
  EXPECT_NE(error.find("unexpected keys (in the file, not in the module): \"heads.2.weight\""), std::string::npos)
      << error;
  EXPECT_NE(error.find("shape mismatch: \"heads.1.weight\" is [5, 4] in the file, [3, 4] in the module"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("{.strict = false}"), std::string::npos) << error;
  EXPECT_THROW(load_state_dict(target, dir / "other.pt"), MismatchError);
  EXPECT_TRUE(torch::equal(target->scale, before)) << "a strict load that fails changes nothing";

  const auto report = load_state_dict(target, dir / "other.pt", {.strict = false});
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.loaded, 10u);
  EXPECT_EQ(report.missing_keys, (std::vector<std::string>{"bn.running_var"}));
  EXPECT_EQ(report.unexpected_keys, (std::vector<std::string>{"heads.2.weight"}));
  ASSERT_EQ(report.shape_mismatches.size(), 1u);
  EXPECT_EQ(report.shape_mismatches[0].key, "heads.1.weight");
  EXPECT_TRUE(torch::equal(target->scale, before + 1));
  EXPECT_FALSE(torch::equal(target->heads[1]->as<torch::nn::Linear>()->weight, torch::zeros({3, 4})));

  // The part of a bigger file under a prefix, and a DDP model's "module." keys, from memory.
  StateDict nested, ddp_keys;
  for (const auto& item : d) {
    nested.insert("backbone." + item.key(), item.value());
    ddp_keys.insert("module." + item.key(), item.value());
  }
  nested.insert("classifier.weight", torch::zeros({2, 2}));
  EXPECT_TRUE(load_state_dict(*target, nested, {.prefix = "backbone."}).ok());
  const auto stripped = load_state_dict(*target, ddp_keys);
  EXPECT_TRUE(stripped.ok());
  EXPECT_NE(stripped.to_string().find("stripped DDP's \"module.\" prefix"), std::string::npos);
}

TEST(StateDict, DamagedAndForeignFilesAreNamedWithTheirFault) {
  TempDir dir;
  Block block;
  save_state_dict(block, dir / "good.pt");
  save_state_dict(block, dir / "good.safetensors", {.format = WeightsFormat::SafeTensors});
  const auto pt = test::file_bytes(dir / "good.pt");
  const auto st = test::file_bytes(dir / "good.safetensors");
  auto read_error = [&](const std::string& name, const std::string& bytes) {
    test::write_bytes(dir / name, bytes);
    return what_of([&] { read_weights(dir / name); });
  };
  auto expect_fault = [&](const std::string& name, const std::string& bytes, const std::string& fault) {
    const auto error = read_error(name, bytes);
    EXPECT_NE(error.find("cannot read weights from \"" + (dir / name) + "\": "), std::string::npos) << error;
    EXPECT_NE(error.find(fault), std::string::npos) << name << ": " << error;
  };
  // Truncated anywhere: the zip directory at the end is gone or points past the file.
  for (const std::size_t size : {pt.size() - 1, pt.size() / 2, std::size_t{100}, std::size_t{30}}) {
    expect_fault("cut.pt", pt.substr(0, size),
                 "a damaged or truncated zip archive of " + std::to_string(size) + " bytes (libzip: ");
  }
  // One flipped byte in a tensor's data: the CRC-32 says so.
  auto flipped = pt;
  const auto name = pt.find("archive/data/0");  // in the local header, 30 bytes after its start
  const auto data =
      name + 14 + (static_cast<unsigned char>(pt[name - 2]) | static_cast<unsigned char>(pt[name - 1]) << 8);
  flipped[data + 1] = static_cast<char>(flipped[data + 1] ^ 0x55);
  expect_fault("flipped.pt", flipped, "damaged: entry \"archive/data/0\"");
  for (const std::size_t size : {st.size() - 1, std::size_t{40}, std::size_t{12}}) {
    expect_fault("cut.safetensors", st.substr(0, size), "truncated");
  }
  expect_fault("garbage.bin", "this is not a weight file at all",
               "not a weight file: neither a zip archive (torch.save), a legacy torch.save pickle nor safetensors; its "
               "first bytes are 74 68 69 73");
  expect_fault("empty.pt", "", "the file is empty");
  // A ddp checkpoint and LibTorch's own torch::save archive are recognised and pointed elsewhere.
  Checkpoints({.directory = dir.path()}).save(1, [&](torch::serialize::OutputArchive& a) { block->save(a); });
  expect_fault("ckpt", test::file_bytes(Checkpoints({.directory = dir.path()}).list().at(0)),
               "a ddp::Checkpoints file, not a state dict: read it with Checkpoints::load_latest");
  torch::save(block, dir / "torchscript.pt");
  expect_fault("torchscript.pt", test::file_bytes(dir / "torchscript.pt"), "a TorchScript archive");
  // A file that is not there.
  const auto missing = what_of([&] { read_weights(dir / "none.pt"); });
  EXPECT_NE(missing.find("cannot read weights from \"" + (dir / "none.pt") + "\": No such file or directory"),
            std::string::npos)
      << missing;
  // A key for a file without one.
  EXPECT_THROW(read_weights(dir / "good.safetensors", "model"), InvalidArgument);
  const auto no_key = what_of([&] { read_weights(dir / "good.pt", "model"); });
  EXPECT_NE(no_key.find("the file's dict has no key \"model\"; its keys are \"scale\", \"steps\""), std::string::npos)
      << no_key;
}

TEST(StateDict, WhatAFormatCannotHoldIsRefusedBeforeWriting) {
  TempDir dir;
  StateDict sparse;
  sparse.insert("s", torch::eye(3).to_sparse());
  EXPECT_NE(what_of([&] { save_state_dict(sparse, dir / "s.pt"); }).find("\"s\" is not a dense tensor"),
            std::string::npos);
  StateDict complex;
  complex.insert("c", torch::zeros({2}, torch::kComplexFloat));
  EXPECT_NE(what_of([&] { save_state_dict(complex, dir / "c.pt"); }).find("\"c\" is ComplexFloat"), std::string::npos);
  EXPECT_THROW(save_state_dict(StateDict{}, dir / "m.pt", {.metadata = {{"a", "b"}}}), InvalidArgument);
  EXPECT_NE(
      what_of([&] { save_state_dict(StateDict{}, dir / "no/such/dir/m.pt"); }).find("save_state_dict: cannot create"),
      std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "s.pt"));
  // An empty state dict is a valid file in both formats.
  save_state_dict(StateDict{}, dir / "empty.pt");
  save_state_dict(StateDict{}, dir / "empty.safetensors", {.format = WeightsFormat::SafeTensors});
  EXPECT_TRUE(read_weights(dir / "empty.pt").tensors.is_empty());
  EXPECT_TRUE(read_weights(dir / "empty.safetensors").tensors.is_empty());
}

// Under DDP rank 0 alone writes, and when save returns on any rank the file is there. Each rank
// runs in a directory of its own and saves to the relative path "model.pt": only rank 0's
// directory gets the file.
TEST(StateDict, DdpSavesOnRankZeroThenBarrier) {
  TempDir dir;
  fs::create_directories(fs::path(dir.path()) / "rank0");
  fs::create_directories(fs::path(dir.path()) / "rank1");
  test::run_ranks(
      2,
      [](int rank, int) {
    const fs::path root = std::getenv("SD_DIR");
    fs::current_path(root / ("rank" + std::to_string(rank)));
    init_process_group("gloo", {.timeout = 60s});
    torch::manual_seed(rank);  // different weights: DDP's construction broadcasts rank 0's
    Block block;
    DistributedDataParallel model(block);
    save_state_dict(model, "model.pt");
    EXPECT_TRUE(fs::exists(root / "rank0" / "model.pt")) << "the barrier comes after rank 0's write";
    EXPECT_FALSE(fs::exists(root / "rank1" / "model.pt")) << "rank 1 does not write";
    const auto saved = read_weights((root / "rank0" / "model.pt").string());
    EXPECT_EQ(saved.tensors.keys(), state_dict(block).keys()) << "the wrapped module's names, without \"module.\"";
    EXPECT_TRUE(torch::equal(saved.tensors["heads.1.weight"], block->heads[1]->as<torch::nn::Linear>()->weight));
    // And a DDP model loads into the module it wraps.
    torch::NoGradGuard no_grad;
    block->scale.zero_();
    EXPECT_TRUE(load_state_dict(model, (root / "rank0" / "model.pt").string()).ok());
    EXPECT_TRUE(torch::equal(block->scale, torch::ones({4})));
    destroy_process_group();
      },
      {.env = {{"SD_DIR", dir.path()}}});
}

}  // namespace
}  // namespace ddp
