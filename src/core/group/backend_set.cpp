#include "group/backend_set.h"

#include <algorithm>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr const char* kSpecHelp =
    "a backend is named alone (\"gloo\", \"nccl\") or per device type (\"cpu:gloo,cuda:nccl\")";

std::string trimmed(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return std::string(text);
}

std::optional<Device::Type> device_type(const std::string& name) {
  if (name == "cpu") return Device::Type::CPU;
  if (name == "cuda") return Device::Type::CUDA;
  return std::nullopt;
}

bool same_type(const BackendChoice& choice, const Device& device) { return choice.device == device.type; }

// The buffer whose device decides an op's backend: its input, or its output where only that has
// elements (scatter off the root).
const Buffer& deciding_buffer(const Op& op) {
  return op.input.count > 0 || op.output.count == 0 ? op.input : op.output;
}

}  // namespace

std::vector<BackendChoice> parse_backend_spec(const std::string& spec) {
  std::vector<BackendChoice> choices;
  const std::string whole = trimmed(spec);
  if (whole.empty()) throw InvalidArgument(cat("the backend is empty: ", kSpecHelp));
  std::size_t start = 0;
  while (start <= whole.size()) {
    const std::size_t end = std::min(whole.find(',', start), whole.size());
    const std::string entry = trimmed(std::string_view(whole).substr(start, end - start));
    start = end + 1;
    if (entry.empty()) throw InvalidArgument(cat("backend ", quote(spec), " has an empty entry: ", kSpecHelp));
    const auto colon = entry.find(':');
    BackendChoice choice;
    if (colon == std::string::npos) {
      choice.backend = entry;
    } else {
      const std::string device = trimmed(std::string_view(entry).substr(0, colon));
      choice.device = device_type(device);
      choice.backend = trimmed(std::string_view(entry).substr(colon + 1));
      if (!choice.device) {
        throw InvalidArgument(cat("backend ", quote(spec), ": unknown device type ", quote(device),
                                  " (ddp knows \"cpu\" and \"cuda\"); ", kSpecHelp));
      }
      if (choice.backend.empty()) {
        throw InvalidArgument(cat("backend ", quote(spec), ": no backend named for ", device, "; ", kSpecHelp));
      }
    }
    for (const auto& earlier : choices) {
      if (earlier.device.has_value() != choice.device.has_value()) {
        throw InvalidArgument(
            cat("backend ", quote(spec), " mixes a plain backend with device-keyed ones; ", kSpecHelp));
      }
      if (choice.device && earlier.device == choice.device) {
        throw InvalidArgument(cat("backend ", quote(spec), " names device type ", device_type_name(*choice.device),
                                  " twice; ", kSpecHelp));
      }
    }
    choices.push_back(std::move(choice));
  }
  if (choices.size() > 1 && !choices.front().device) {
    throw InvalidArgument(cat("backend ", quote(spec), " names several backends without device types; ", kSpecHelp));
  }
  // CPU first: the canonical order, which every rank shares whatever order its spec had.
  std::stable_sort(choices.begin(), choices.end(), [](const BackendChoice& a, const BackendChoice& b) {
    return a.device.value_or(Device::Type::CPU) < b.device.value_or(Device::Type::CPU);
  });
  return choices;
}

std::string to_string(const std::vector<BackendChoice>& choices) {
  std::string out;
  for (const auto& c : choices) {
    if (!out.empty()) out += ",";
    out += c.device ? cat(device_type_name(*c.device), ":", c.backend) : c.backend;
  }
  return out;
}

std::size_t choice_for(const std::vector<BackendChoice>& choices, const Op& op) {
  const Device::Type type = op.type == OpType::Barrier ? Device::Type::CPU : deciding_buffer(op).device.type;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].device || choices[i].device == type) return i;
  }
  return choices.size();
}

std::string backend_for(const std::vector<BackendChoice>& choices, const Op& op) {
  const std::size_t i = choice_for(choices, op);
  return i < choices.size() ? choices[i].backend : to_string(choices);
}

std::string_view device_type_name(Device::Type type) { return type == Device::Type::CPU ? "cpu" : "cuda"; }

std::string device_advice(const std::string& spec, const Device& device) {
  if (device.is_cpu()) {
    return "; for CPU tensors beside CUDA ones, name a backend for each: init_process_group(\"cpu:gloo,cuda:nccl\") "
           "(PyTorch 2.x's default where CUDA is available)";
  }
  if (spec.find("nccl") != std::string::npos) {
    return "; the nccl backend takes CUDA buffers on this rank's GPU (the one LOCAL_RANK names)";
  }
  return "; for CUDA tensors name a CUDA backend too, init_process_group(\"cpu:gloo,cuda:nccl\") (the nccl backend "
         "takes CUDA buffers on this rank's GPU), or copy them to the CPU (the LibTorch front does that for gloo)";
}

BackendSet::BackendSet(std::vector<BackendChoice> choices, std::vector<std::unique_ptr<Backend>> backends)
    : choices_(std::move(choices)), backends_(std::move(backends)), name_(to_string(choices_)) {
  host_ = for_device(Device{});
}

bool BackendSet::accepts(const Device& device) const { return for_device(device) != nullptr; }

Backend* BackendSet::for_device(const Device& device) const {
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    if (choices_[i].device && !same_type(choices_[i], device)) continue;
    if (backends_[i]->accepts(device)) return backends_[i].get();
  }
  return nullptr;
}

Backend& BackendSet::for_op(const Op& op) const {
  const std::size_t i = choice_for(choices_, op);
  return *backends_[i < backends_.size() ? i : 0];
}

void BackendSet::abort() noexcept {
  for (auto& backend : backends_) backend->abort();
}

std::shared_ptr<void> BackendSet::allocate_shared(std::size_t bytes) {
  return host_ ? host_->allocate_shared(bytes) : nullptr;
}

}  // namespace ddp::detail
