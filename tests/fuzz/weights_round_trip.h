// What both weight-file fuzzers check beyond "no crash, no sanitizer report": weights that were
// read can be written in both formats, and what is written reads back to the same tensors.
#pragma once

#include "state_dict/weights.h"

namespace ddp::fuzz {

// Traps when `w`, written as a torch.save zip archive and as safetensors, does not read back
// to the same names, types, shapes and values.
void check_round_trip(const detail::weights::Weights& w);

}  // namespace ddp::fuzz
