// The backend of a group of one: every collective is a copy (or nothing). It makes a group of
// size 1 work everywhere without peers, a store round trip or special cases in user code.
#pragma once

#include <memory>

#include "ddp/backend.h"

namespace ddp::detail {

std::unique_ptr<Backend> make_local_backend(std::string_view name);

}  // namespace ddp::detail
