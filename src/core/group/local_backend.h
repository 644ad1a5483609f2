// The backend of a group of one: nothing to communicate, only copies to make.
#pragma once

#include <memory>
#include <string_view>

#include "ddp/backend.h"

namespace ddp::detail {

// A group of one of the backend registered as `name`, taking buffers on the devices `accepts`
// admits (what that backend takes at any size: gloo the CPU, nccl CUDA devices), whose gathers
// and scatters are `copy`s from input to output (the backend's: only it knows its devices).
std::unique_ptr<Backend> make_local_backend(std::string_view name, DeviceFilter accepts, BufferCopy copy);

}  // namespace ddp::detail
