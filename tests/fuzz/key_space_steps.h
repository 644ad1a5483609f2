// The fuzzer's key-space mode (key_space_steps.cpp).
#pragma once

#include <string_view>

namespace ddp::fuzz {

// Applies the ddp requests in `stream` (each after a byte naming its client) to a KeySpace and
// traps when it disagrees with a model of its waits and watchers.
void key_space_steps(std::string_view stream);

}  // namespace ddp::fuzz
