// A weight file of any supported format, recognised from its first bytes (not its name):
// torch.save's zip archive ("PK\3\4"), its legacy pickle stream (a pickle's PROTO opcode), or
// safetensors (a header length, then '{'). No LibTorch: the fuzzers call this.
#pragma once

#include <string>
#include <string_view>

#include "state_dict/weights.h"

namespace ddp::detail::weights {

// The tensors of the state dict in `bytes` (for a pickled checkpoint dict, its entry `key`).
// Throws IOError saying what is wrong (the caller adds the file's name), InvalidArgument when
// `key` is given for a safetensors file.
Weights read_weights(std::string_view bytes, const std::string& key);

}  // namespace ddp::detail::weights
