// Looking up backends by name (see register_backend in ddp/backend.h).
#pragma once

#include "ddp/backend.h"

namespace ddp::detail {

// Registers gloo and nccl (or nccl's stub) once; later calls do nothing.
void register_builtin_backends();

// The factory registered as `name`. Throws InvalidArgument listing the known names.
BackendFactory find_backend(const std::string& name);
// Which devices' buffers the backend registered as `name` takes. Throws as find_backend.
DeviceFilter accepted_devices(const std::string& name);

// Throws, saying why, when this process cannot run the builtin backend `name` (nccl: no GPU, or
// none that LOCAL_RANK names, or a build without NCCL; gloo: ddp's Gloo calls bound into another
// Gloo, gloo/binding.h). Other backends: nothing to check.
void check_backend_usable(const std::string& name);

}  // namespace ddp::detail
