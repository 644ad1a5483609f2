// Looking up backends by name (see register_backend in ddp/backend.h), and the builtin ones.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddp/backend.h"
#include "util/variables.h"

namespace ddp::detail {

// Registers gloo and nccl (or nccl's stub) once; later calls do nothing.
void register_builtin_backends();
// What "" means, as in PyTorch 2.x: "cpu:gloo,cuda:nccl" where a CUDA device is here and this
// build has NCCL, else "gloo". Pure in the first form.
std::string default_backend_spec(bool cuda_available);
std::string default_backend_spec();

// The variables the builtin backends read as they are made (nccl reads none of ddp's).
std::vector<VariableInfo> builtin_backend_variables();

// The factory registered as `name`. Throws InvalidArgument listing the known names.
BackendFactory find_backend(const std::string& name);
// Which devices' buffers the backend registered as `name` takes. Throws as find_backend.
DeviceFilter accepted_devices(const std::string& name);

// Runs the usability check registered with `name` (BackendRegistration::check_usable): throws,
// saying why and what to install, when this process cannot run it. Throws as find_backend.
void check_backend_usable(const std::string& name);

// A group of one of the backend registered as `name`: its device filter, and its copy for what a
// lone rank gathers or scatters. Throws as find_backend.
std::unique_ptr<Backend> make_local_backend(const std::string& name);

}  // namespace ddp::detail
