// The LibTorch side of weight files: modules and tensors to the records the format code writes,
// and back (state_dict/weights.h).
#include "ddp/torch/state_dict.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "ddp/error.h"
#include "ddp/torch/checkpoint.h"
#include "state_dict/load_plan.h"
#include "state_dict/pytorch_file.h"
#include "state_dict/safetensors_file.h"
#include "state_dict/weights_file.h"
#include "util/strings.h"

namespace ddp {

using detail::cat;
using detail::quote;
namespace weights = detail::weights;

static_assert(std::endian::native == std::endian::little, "weight files hold little-endian bytes, copied as they are");

namespace {

constexpr std::pair<weights::ElementType, at::ScalarType> kTypes[] = {
    {weights::ElementType::Float32, at::kFloat}, {weights::ElementType::Float64, at::kDouble},
    {weights::ElementType::Float16, at::kHalf},  {weights::ElementType::BFloat16, at::kBFloat16},
    {weights::ElementType::Int8, at::kChar},     {weights::ElementType::UInt8, at::kByte},
    {weights::ElementType::Int16, at::kShort},   {weights::ElementType::Int32, at::kInt},
    {weights::ElementType::Int64, at::kLong},    {weights::ElementType::Bool, at::kBool},
};

at::ScalarType scalar_type(weights::ElementType type) {
  for (const auto& [element, scalar] : kTypes) {
    if (element == type) return scalar;
  }
  throw InvalidArgument("weights: an element type without a LibTorch type");
}

weights::ElementType element_type(const at::Tensor& t, const std::string& name) {
  for (const auto& [element, scalar] : kTypes) {
    if (scalar == t.scalar_type()) return element;
  }
  throw InvalidArgument(cat("save_state_dict: tensor ", quote(name), " is ", t.scalar_type(),
                            "; weight files hold float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64 "
                            "and bool"));
}

std::string dtype_name(const at::Tensor& t) {
  for (const auto& [element, scalar] : kTypes) {
    if (scalar == t.scalar_type()) return std::string(weights::name(element));
  }
  return cat(t.scalar_type());
}

void check_savable(const at::Tensor& t, const std::string& name) {
  if (!t.defined()) throw InvalidArgument(cat("save_state_dict: tensor ", quote(name), " is undefined"));
  if (t.layout() != at::kStrided || t.is_quantized() || !t.has_storage()) {
    throw InvalidArgument(cat("save_state_dict: tensor ", quote(name), " is not a dense tensor (", t.layout(),
                              "); save t.to_dense() instead"));
  }
}

std::string bytes_of(const at::Tensor& contiguous_cpu) {
  return std::string(static_cast<const char*>(contiguous_cpu.data_ptr()), contiguous_cpu.nbytes());
}

// PyTorch format: every storage once, whole, with each tensor as its view into it (as
// torch.save does, which keeps shared weights shared).
weights::Weights pytorch_records(const StateDict& tensors) {
  weights::Weights out;
  std::map<std::pair<const void*, weights::ElementType>, std::size_t> index;
  for (const auto& item : tensors) {
    const auto& t = item.value();
    check_savable(t, item.key());
    const auto type = element_type(t, item.key());
    const auto size = weights::element_size(type);
    auto [it, fresh] = index.try_emplace({t.storage().unsafeGetStorageImpl(), type}, out.storages.size());
    if (fresh) {
      const std::size_t nbytes = t.storage().nbytes();
      if (nbytes % size != 0) {
        throw InvalidArgument(cat("save_state_dict: tensor ", quote(item.key()), " views a storage of ", nbytes,
                                  " bytes, not a whole number of ", weights::name(type), "s; save a clone of it"));
      }
      const auto numel = static_cast<std::int64_t>(nbytes / size);
      auto whole = at::empty({0}, t.options().requires_grad(false)).set_(t.storage(), 0, {numel}, {1}).cpu();
      out.storages.push_back({type, static_cast<std::uint64_t>(numel), bytes_of(whole)});
    }
    out.tensors.emplace_back(
        item.key(), weights::TensorRecord{type, t.sizes().vec(), t.strides().vec(), t.storage_offset(), it->second});
  }
  return out;
}

// safetensors: every tensor contiguous in its own stretch of the file.
weights::Weights safetensors_records(const StateDict& tensors, const std::map<std::string, std::string>& metadata) {
  weights::Weights out;
  for (const auto& item : tensors) {
    check_savable(item.value(), item.key());
    const auto type = element_type(item.value(), item.key());
    const auto t = item.value().contiguous().cpu();
    out.storages.push_back({type, static_cast<std::uint64_t>(t.numel()), bytes_of(t)});
    out.tensors.emplace_back(
        item.key(), weights::TensorRecord{type, t.sizes().vec(), weights::contiguous_strides(t.sizes().vec()), 0,
                                          out.storages.size() - 1});
  }
  out.metadata.assign(metadata.begin(), metadata.end());
  return out;
}

StateDict to_tensors(weights::Weights& file) {
  std::vector<at::Tensor> storages;
  for (auto& storage : file.storages) {
    const auto options = at::TensorOptions().dtype(scalar_type(storage.type));
    if (storage.numel == 0) {
      storages.push_back(at::empty({0}, options));
      continue;
    }
    auto owner = std::make_shared<std::string>(std::move(storage.bytes));
    storages.push_back(at::from_blob(
        owner->data(), {static_cast<std::int64_t>(storage.numel)}, [owner](void*) mutable { owner.reset(); }, options));
  }
  StateDict out;
  for (const auto& [name, t] : file.tensors)
    out.insert(name, storages[t.storage].as_strided(t.sizes, t.strides, t.offset));
  return out;
}

// The whole file, read once: the readers are bounded by its real size.
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IOError(cat("cannot read weights from ", quote(path, 512), ": ", std::strerror(errno)));
  const std::streamoff size = in.tellg();
  if (size < 0) throw IOError(cat("cannot read weights from ", quote(path, 512), ": not a regular file"));
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  in.read(bytes.data(), size);
  if (in.gcount() != size) {
    throw IOError(cat("cannot read weights from ", quote(path, 512), ": it ended after ", in.gcount(), " of its ", size,
                      " bytes (did it change while it was read?)"));
  }
  return bytes;
}

std::vector<detail::TensorInfo> infos(const StateDict& tensors) {
  std::vector<detail::TensorInfo> out;
  for (const auto& item : tensors) out.push_back({item.key(), item.value().sizes().vec(), dtype_name(item.value())});
  return out;
}

LoadReport load_tensors(torch::nn::Module& module, const StateDict& tensors, const LoadOptions& options,
                        const std::string& source, std::string format, const std::vector<std::string>& notes) {
  auto own = state_dict(module);
  const auto own_list = own.values();
  const auto file_list = tensors.values();
  auto plan = detail::plan_load(infos(own), infos(tensors), options.prefix);
  LoadReport report = std::move(plan.report);
  report.format = std::move(format);
  report.notes.insert(report.notes.begin(), notes.begin(), notes.end());
  if (options.strict && !report.ok()) {
    throw MismatchError(cat("load_state_dict: ", source, " does not match the module; nothing was loaded.\n",
                            report.to_string(),
                            "Build the module as the one that saved the file, or load what matches with "
                            "{.strict = false}."));
  }
  torch::NoGradGuard no_grad;
  for (const auto& [to, from] : plan.copies) {
    own_list[to].copy_(file_list[from]);
    ++report.loaded;
  }
  return report;
}

std::string names(const std::vector<std::string>& keys) {
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < keys.size() && i < 20; ++i) shown.push_back(quote(keys[i], 200));
  if (keys.size() > 20) shown.push_back(cat("and ", keys.size() - 20, " more"));
  return detail::join(shown, ", ");
}

}  // namespace

std::string LoadReport::to_string() const {
  std::string out;
  if (!missing_keys.empty()) out += cat("  missing keys (in the module, not in the file): ", names(missing_keys), "\n");
  if (!unexpected_keys.empty())
    out += cat("  unexpected keys (in the file, not in the module): ", names(unexpected_keys), "\n");
  for (std::size_t i = 0; i < shape_mismatches.size() && i < 20; ++i) {
    const auto& m = shape_mismatches[i];
    out += cat("  shape mismatch: ", quote(m.key, 200), " is ", weights::shape_string(m.in_file), " in the file, ",
               weights::shape_string(m.in_module), " in the module\n");
  }
  if (shape_mismatches.size() > 20) out += cat("  and ", shape_mismatches.size() - 20, " more shape mismatches\n");
  for (const auto& note : notes) out += cat("  note: ", note, "\n");
  return out;
}

StateDict state_dict(const torch::nn::Module& module) {
  StateDict out;
  // Python's order: each module's own parameters, then its own buffers, then its children.
  std::function<void(const torch::nn::Module&, const std::string&)> add =
      [&](const torch::nn::Module& m, const std::string& prefix) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) out.insert(prefix + p.key(), p.value().detach());
    for (const auto& b : m.named_buffers(/*recurse=*/false)) out.insert(prefix + b.key(), b.value().detach());
    for (const auto& child : m.named_children()) add(*child.value(), prefix + child.key() + ".");
  };
  add(module, "");
  return out;
}

void save_state_dict(const StateDict& tensors, const std::string& path, const SaveOptions& options) {
  std::string bytes;
  if (options.format == WeightsFormat::PyTorch) {
    if (!options.metadata.empty()) {
      throw InvalidArgument(
          "save_state_dict: metadata goes into safetensors files only, the PyTorch format has no "
          "place for it: use {.format = WeightsFormat::SafeTensors}, or leave .metadata empty");
    }
    bytes = weights::write_pytorch(pytorch_records(tensors));
  } else {
    bytes = weights::write_safetensors(safetensors_records(tensors, options.metadata));
  }
  try {
    write_file_atomically(path, bytes);
  } catch (const IOError& e) {
    throw IOError(cat("save_state_dict: ", e.what()));
  }
}

void save_state_dict(const torch::nn::Module& module, const std::string& path, const SaveOptions& options) {
  save_state_dict(state_dict(module), path, options);
}

void detail::save_on_rank_zero(const StateDict& tensors, const std::string& path, const SaveOptions& options,
                               const std::shared_ptr<ProcessGroup>& group) {
  std::exception_ptr failure;
  if (!group || group->rank() == 0) {
    try {
      save_state_dict(tensors, path, options);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // Everyone meets here, also when rank 0 failed, so that nobody waits for a barrier in vain.
  if (group) group->barrier(Launch::OnWait)->wait();
  if (failure) std::rethrow_exception(failure);
}

WeightsFile read_weights(const std::string& path, const std::string& key) {
  const std::string bytes = read_file(path);
  weights::Weights file;
  try {
    file = weights::read_weights(bytes, key);
  } catch (const IOError& e) {
    throw IOError(cat("cannot read weights from ", quote(path, 512), ": ", e.what()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(cat("read_weights(", quote(path, 512), "): ", e.what()));
  }
  WeightsFile out;
  out.format = file.format;
  out.metadata.insert(file.metadata.begin(), file.metadata.end());
  out.notes = file.notes;
  out.tensors = to_tensors(file);
  return out;
}

LoadReport load_state_dict(torch::nn::Module& module, const std::string& path, const LoadOptions& options) {
  auto file = read_weights(path, options.key);
  return load_tensors(module, file.tensors, options, quote(path, 512) + " (" + file.format + ")", file.format,
                      file.notes);
}

LoadReport load_state_dict(torch::nn::Module& module, const StateDict& tensors, const LoadOptions& options) {
  if (!options.key.empty()) {
    throw InvalidArgument(
        "load_state_dict: LoadOptions::key names an entry of a checkpoint file; tensors in memory "
        "have none (leave it empty)");
  }
  return load_tensors(module, tensors, options, "the state dict", "memory", {});
}

}  // namespace ddp
