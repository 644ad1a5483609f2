// A group's backends: one ("gloo", "nccl"), or one per device type ("cpu:gloo,cuda:nccl",
// PyTorch 2.x's device-keyed form, whose CPU tensors go over gloo and CUDA tensors over NCCL).
// The group runs each operation on the backend its buffers' device names; everything above the
// backends (one ordered queue, sequence numbers, timeouts, progress records, the flight recorder)
// stays one per group.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/backend.h"
#include "op/op.h"

namespace ddp::detail {

// One entry of a backend spec: `backend` for buffers on `device` (empty: for every device the
// backend takes).
struct BackendChoice {
  std::optional<Device::Type> device;
  std::string backend;
  bool operator==(const BackendChoice&) const = default;
};

// "gloo" -> {gloo}; "cpu:gloo,cuda:nccl" -> {cpu: gloo, cuda: nccl}. Pure. Throws InvalidArgument
// for an empty spec or entry, an unknown device type, a device named twice, or a mix of keyed and
// plain entries, saying what a spec looks like.
std::vector<BackendChoice> parse_backend_spec(const std::string& spec);
// The spec in canonical form: "gloo", or "cpu:gloo,cuda:nccl" (CPU first).
std::string to_string(const std::vector<BackendChoice>& choices);
// The one rule for which backend runs `op`: the index in `choices` of the one named for its
// buffers' device (a barrier, with no buffers: the CPU's), or choices.size() where none is named
// for it. Pure: BackendSet::for_op, the failure text and the flight recorder all decide by it.
std::size_t choice_for(const std::vector<BackendChoice>& choices, const Op& op);
// That backend by name (none named: the whole spec).
std::string backend_for(const std::vector<BackendChoice>& choices, const Op& op);
// "cpu" or "cuda".
std::string_view device_type_name(Device::Type type);
// What to do when the group `spec` takes no buffers on `device`: the tail of that error.
std::string device_advice(const std::string& spec, const Device& device);

class BackendSet {
 public:
  // One backend per choice, in the choices' order (each made for its choice).
  BackendSet(std::vector<BackendChoice> choices, std::vector<std::unique_ptr<Backend>> backends);

  // The spec, canonical: what get_backend() reports.
  const std::string& name() const { return name_; }
  // Whether some backend takes buffers on `device` as they are.
  bool accepts(const Device& device) const;
  // The backend of `device`'s buffers, or null.
  Backend* for_device(const Device& device) const;
  // The backend that runs `op`, by choice_for: its buffers' device's; a barrier's is the CPU's
  // (as PyTorch's gloo barrier in a keyed group). Where none is named for it (a barrier of
  // "cuda:nccl" alone), the first.
  Backend& for_op(const Op& op) const;
  // The backend of host buffers, or null (a group of nccl alone).
  Backend* host() const { return host_; }
  void abort() noexcept;
  std::shared_ptr<void> allocate_shared(std::size_t bytes);

 private:
  std::vector<BackendChoice> choices_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::string name_;
  Backend* host_ = nullptr;
};

}  // namespace ddp::detail
