// convert_sync_batchnorm: BatchNorm layers in a module tree replaced by SyncBatchNorm layers that
// hold the same tensors, where the replacement is what will run (see the header for what cannot be).
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <optional>
#include <unordered_set>

#include "ddp/error.h"
#include "ddp/torch/sync_batch_norm.h"
#include "util/strings.h"

namespace ddp {
namespace detail {

std::shared_ptr<SyncBatchNormImpl> adopt_batch_norm(const torch::nn::BatchNormOptions& options,
                                                    std::shared_ptr<ProcessGroup> group,
                                                    const std::array<at::Tensor, 5>& tensors) {
  return std::shared_ptr<SyncBatchNormImpl>(new SyncBatchNormImpl(options, std::move(group), tensors));
}

}  // namespace detail

namespace {

using detail::cat;

struct BatchNormParts {
  std::string type;
  torch::nn::BatchNormOptions options;
  std::array<at::Tensor, 5> tensors;
};

template <typename Impl>
std::optional<BatchNormParts> parts_of(torch::nn::Module& module, const char* type) {
  auto* bn = dynamic_cast<Impl*>(&module);
  if (!bn) return std::nullopt;
  return BatchNormParts{
      type, bn->options, {bn->weight, bn->bias, bn->running_mean, bn->running_var, bn->num_batches_tracked}};
}

std::optional<BatchNormParts> batch_norm_parts(torch::nn::Module& module) {
  if (auto p = parts_of<torch::nn::BatchNorm1dImpl>(module, "torch::nn::BatchNorm1d")) return p;
  if (auto p = parts_of<torch::nn::BatchNorm2dImpl>(module, "torch::nn::BatchNorm2d")) return p;
  return parts_of<torch::nn::BatchNorm3dImpl>(module, "torch::nn::BatchNorm3d");
}

// Where a layer is registered: a parent and the name it has there.
struct Site {
  torch::nn::Module* parent;
  std::string name;
};

struct Conversion {
  std::shared_ptr<torch::nn::Module> layer;  // the only handle the conversion holds
  BatchNormParts parts;
  std::string path;  // the first of its names from the root
  std::vector<Site> sites;
};

// A container keeps its own handle to each member, besides the registry's.
bool holds_own_handles(torch::nn::Module* parent) {
  return dynamic_cast<torch::nn::SequentialImpl*>(parent) || dynamic_cast<torch::nn::ModuleListImpl*>(parent) ||
         dynamic_cast<torch::nn::ModuleDictImpl*>(parent);
}

void find_batch_norms(torch::nn::Module& parent, const std::string& prefix, std::vector<Conversion>& found,
                      std::unordered_set<const torch::nn::Module*>& visited) {
  if (!visited.insert(&parent).second) return;
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> children;
  for (const auto& item : parent.named_children()) children.emplace_back(item.key(), item.value());
  for (auto& [name, child] : children) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (auto parts = batch_norm_parts(*child)) {
      auto it = std::find_if(found.begin(), found.end(), [&](const Conversion& c) { return c.layer == child; });
      if (it == found.end()) it = found.insert(found.end(), Conversion{child, std::move(*parts), path, {}});
      it->sites.push_back({&parent, name});
    } else {
      find_batch_norms(*child, path, found, visited);
    }
  }
}

// Handles to the layer beyond the registry's, its containers' and the conversion's own.
long foreign_handles(const Conversion& c) {
  long expected = 1;
  for (const auto& site : c.sites) expected += holds_own_handles(site.parent) ? 2 : 1;
  return c.layer.use_count() - expected;
}

void replace(const Site& site, torch::nn::Module& old, const std::shared_ptr<SyncBatchNormImpl>& replacement) {
  if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(site.parent)) {
    dict->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{{site.name, replacement}});
    return;
  }
  site.parent->replace_module(site.name, replacement);
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(site.parent)) {
    for (auto& slot : *sequential) {
      if (slot.ptr().get() == &old) slot = torch::nn::AnyModule(replacement);
    }
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(site.parent)) {
    for (auto& slot : *list) {
      if (slot.get() == &old) slot = replacement;
    }
  }
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<ProcessGroup> process_group) {
  if (auto parts = batch_norm_parts(module)) {
    throw InvalidArgument(cat("convert_sync_batchnorm: the module itself is a ", parts->type,
                              ", which cannot be replaced in place; construct a ddp::SyncBatchNorm with its options "
                              "instead"));
  }
  std::vector<Conversion> found;
  {
    std::unordered_set<const torch::nn::Module*> visited;
    find_batch_norms(module, "", found, visited);
  }
  std::vector<std::string> refused;
  for (const auto& c : found) {
    if (foreign_handles(c) > 0) refused.push_back(cat("'", c.path, "' (", c.parts.type, ")"));
  }
  if (!refused.empty()) {
    throw InvalidArgument(cat(
        "convert_sync_batchnorm: ", detail::join(refused, ", "), refused.size() == 1 ? " is" : " are",
        " also held outside the module registry (by a member such as `torch::nn::BatchNorm2d bn;` in the parent's "
        "class, or by a variable), so the parent's forward would go on running plain batch norm. Nothing was "
        "converted. Declare such members as ddp::SyncBatchNorm (the same options, the same parameter names), or keep "
        "the layers in a Sequential, ModuleList or ModuleDict, or call them by name through the registry."));
  }
  for (auto& c : found) {
    auto replacement = detail::adopt_batch_norm(c.parts.options, process_group, c.parts.tensors);
    replacement->train(c.layer->is_training());
    for (const auto& site : c.sites) replace(site, *c.layer, replacement);
  }
  return static_cast<int>(found.size());
}

}  // namespace ddp
