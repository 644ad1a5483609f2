// The "gloo" backend (Gloo's TCP transport, CPU buffers).
#pragma once

#include <memory>

#include "ddp/backend.h"

namespace ddp::detail {

// Connects the full mesh through context.store. Throws on rendezvous failure or timeout.
std::unique_ptr<Backend> make_gloo_backend(const BackendContext& context);

}  // namespace ddp::detail
