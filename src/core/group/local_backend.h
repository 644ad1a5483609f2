// The backend of a group of one: nothing to communicate, only copies to make.
#pragma once

#include <memory>
#include <string_view>

#include "ddp/backend.h"

namespace ddp::detail {

// A group of one of the backend registered as `name`, taking buffers on the devices `accepts`
// admits (what that backend takes at any size: gloo the CPU, nccl CUDA devices).
std::unique_ptr<Backend> make_local_backend(std::string_view name, DeviceFilter accepts);

}  // namespace ddp::detail
