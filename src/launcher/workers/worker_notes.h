// The notes ddprun prints once, before the first workers start, about what it sets in their
// environment beyond what the user did: OMP_NUM_THREADS=1 (as torchrun does) and an
// OPENBLAS_CORETYPE this machine's OpenBLAS needs (openblas.h).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "cli/environment.h"

namespace ddp::launcher {

// Says the notes through `say` for `nproc` workers under ddprun's environment `parent`; returns
// the OPENBLAS_CORETYPE the workers get (nullopt: none, or the user set it).
std::optional<std::string> say_worker_notes(const EnvLookup& parent, int nproc,
                                            const std::function<void(const std::string&)>& say);

}  // namespace ddp::launcher
