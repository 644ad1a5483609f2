// Registers the backends that ship with ddp. The one place that names them.
#include <mutex>

#include "backend_registry.h"
#include "gloo/gloo_backend.h"
#include "nccl/nccl_backend.h"

namespace ddp::detail {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A user's own registration under the same name wins.
    if (!is_backend_registered("gloo")) register_backend("gloo", make_gloo_backend);
    if (!is_backend_registered("nccl")) register_backend("nccl", make_nccl_backend);
  });
}

}  // namespace ddp::detail
