// Weights that cross the language line: PyTorch state dicts and safetensors, both ways.
//
//   ddp::save_state_dict(ddp_model, "model.pt");   // rank 0 writes, then the group's barrier
//   ddp::save_state_dict(net, "model.safetensors", {.format = ddp::WeightsFormat::SafeTensors});
//   auto report = ddp::load_state_dict(net, "pretrained.pt");  // a file Python wrote
//
//   # Python
//   model.load_state_dict(torch.load("model.pt", weights_only=True))
//
// The names are PyTorch's, so a LibTorch module and its Python twin (the same layers under the
// same attribute names) exchange weights: parameters, then buffers, module by module in
// registration order, nested modules joined with dots ("layer1.0.conv1.weight"), BatchNorm's
// num_batches_tracked included. LibTorch has no non-persistent buffers: every buffer is saved.
//
// Files are data, never code: the readers are bounded by the file's size, never run or import
// anything, and refuse a pickle that needs more than tensors, containers and numbers (such as a
// whole model saved with torch.save(model)), saying how to re-save it. docs/STATE_DICT.md has the
// formats and the rules.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddp/process_group.h"
#include "ddp/torch/distributed_data_parallel.h"

namespace ddp {

// Name -> tensor, in the module's order (LibTorch's insertion-ordered dict).
using StateDict = torch::OrderedDict<std::string, at::Tensor>;

enum class WeightsFormat : std::uint8_t {
  PyTorch,      // the zip archive of Python's torch.save(model.state_dict(), path)
  SafeTensors,  // Hugging Face's safetensors: a JSON header and the raw little-endian tensors
};

struct SaveOptions {
  WeightsFormat format = WeightsFormat::PyTorch;
  std::map<std::string, std::string> metadata;  // safetensors' __metadata__; the PyTorch format has no place for it
};

struct LoadOptions {
  // Throw when the file and the module do not match exactly (missing or unexpected keys, other
  // shapes), before anything is copied. false: load what matches and return the report.
  bool strict = true;
  // Load only the file's keys that begin with this, without it ("encoder." loads the encoder
  // part of a bigger model's file into the encoder module); the others are ignored.
  std::string prefix;
  // The state dict is this entry of a pickled checkpoint dict ({"model": sd, "epoch": 3}: "model").
  std::string key;
};

struct ShapeMismatch {
  std::string key;
  std::vector<std::int64_t> in_file, in_module;
};

// What load_state_dict did, as PyTorch reports it (missing keys, unexpected keys, shape
// mismatches by name) and the rest: the format read, how many tensors were loaded, and notes
// (type conversions, the "module." prefix stripped, what the file held besides tensors).
struct LoadReport {
  std::string format;  // "PyTorch zip", "PyTorch legacy", "safetensors", "memory"
  std::size_t loaded = 0;
  std::vector<std::string> missing_keys;        // in the module, not in the file: left as they were
  std::vector<std::string> unexpected_keys;     // in the file, not in the module
  std::vector<ShapeMismatch> shape_mismatches;  // in both with different shapes: not loaded
  std::vector<std::string> notes;

  bool ok() const { return missing_keys.empty() && unexpected_keys.empty() && shape_mismatches.empty(); }
  // Every problem and note, one per line, keys quoted.
  std::string to_string() const;
};

// A file's contents, read without a module.
struct WeightsFile {
  std::string format;  // as LoadReport::format
  StateDict tensors;   // on the CPU, in the file's order; tensors that shared storage in the file share it here
  std::map<std::string, std::string> metadata;  // safetensors' __metadata__
  std::vector<std::string> notes;
};

// The module's parameters and buffers (detached, sharing their storage) under PyTorch's names.
StateDict state_dict(const torch::nn::Module& module);
template <typename M>
StateDict state_dict(const torch::nn::ModuleHolder<M>& module) {
  return state_dict(*module);
}
template <typename M>
StateDict state_dict(const std::shared_ptr<M>& module) {
  return state_dict(*module);
}

// Writes the tensors to `path` atomically (a temporary file, fsync, rename): a crash leaves the
// old file or the new one. Tensors on any device are written from the CPU, with location "cpu";
// tensors that share storage are written once, sharing it in the file (PyTorch format). Not
// collective: the calling process writes. Throws InvalidArgument for a tensor the format cannot
// hold (sparse, an unsupported dtype) or metadata with the PyTorch format, IOError naming the
// path when it cannot be written.
void save_state_dict(const StateDict& tensors, const std::string& path, const SaveOptions& options = {});
void save_state_dict(const torch::nn::Module& module, const std::string& path, const SaveOptions& options = {});
template <typename M>
void save_state_dict(const torch::nn::ModuleHolder<M>& module, const std::string& path,
                     const SaveOptions& options = {}) {
  save_state_dict(*module, path, options);
}
template <typename M>
void save_state_dict(const std::shared_ptr<M>& module, const std::string& path, const SaveOptions& options = {}) {
  save_state_dict(*module, path, options);
}

namespace detail {
// Rank 0 of `group` (every process when null) saves; then the group meets at a barrier; rank 0
// rethrows its error after it.
void save_on_rank_zero(const StateDict& tensors, const std::string& path, const SaveOptions& options,
                       const std::shared_ptr<ProcessGroup>& group);
}  // namespace detail

// The lesson's `if rank == 0: torch.save(model.module.state_dict(), path)`, `dist.barrier()`:
// collective over the model's group. Rank 0 writes the wrapped module's state dict (no
// "module." prefix); when save returns on any rank, the file is complete. Rank 0 throws as above.
template <typename M>
void save_state_dict(const DistributedDataParallel<M>& model, const std::string& path,
                     const SaveOptions& options = {}) {
  detail::save_on_rank_zero(state_dict(*model->module()), path, options, model->process_group());
}

// Reads a file of any supported format, recognised from its bytes: torch.save's zip format
// (PyTorch 1.6 and later), its legacy format (_use_new_zipfile_serialization=False), and
// safetensors. `key`: the state dict is that entry of a pickled checkpoint dict. Throws IOError
// naming the file and the fault (missing, truncated, damaged, not a weight file, a pickle that
// needs code), InvalidArgument for a key with a safetensors file.
WeightsFile read_weights(const std::string& path, const std::string& key = "");

// Copies the file's tensors into the module's parameters and buffers of the same names, on the
// module's devices, converting the element type where it differs (with a note), without
// recording gradients. The file's keys are stripped of DDP's "module." when all of them carry it
// and the module's keys do not (a note says so). Not collective: each process reads the file.
// Throws what read_weights throws and, when strict and the file does not match, MismatchError
// with the whole report, before anything is copied.
LoadReport load_state_dict(torch::nn::Module& module, const std::string& path, const LoadOptions& options = {});
// The same from tensors in memory (options.key must be empty).
LoadReport load_state_dict(torch::nn::Module& module, const StateDict& tensors, const LoadOptions& options = {});
template <typename M>
LoadReport load_state_dict(const torch::nn::ModuleHolder<M>& module, const std::string& path,
                           const LoadOptions& options = {}) {
  return load_state_dict(*module.ptr(), path, options);
}
template <typename M>
LoadReport load_state_dict(const std::shared_ptr<M>& module, const std::string& path, const LoadOptions& options = {}) {
  return load_state_dict(*module, path, options);
}
// A DDP model loads into the module it wraps (Python: model.module.load_state_dict(...)). Every
// rank reads the file; they end with equal weights when they read the same file.
template <typename M>
LoadReport load_state_dict(const DistributedDataParallel<M>& model, const std::string& path,
                           const LoadOptions& options = {}) {
  return load_state_dict(*model->module(), path, options);
}

}  // namespace ddp
