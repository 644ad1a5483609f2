// Registers the backends that ship with ddp. The one place that names them.
#include <mutex>

#include "backend_registry.h"
#include "gloo/gloo_backend.h"
#include "nccl/nccl_backend.h"
#include "shm/shm_backend.h"

namespace ddp::detail {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A user's own registration under the same name wins.
    // "gloo" uses shared memory among the ranks of a host (src/core/shm/; DDP_SHM=0: plain gloo).
    if (!is_backend_registered("gloo")) register_backend("gloo", make_cpu_backend);
    if (!is_backend_registered("nccl")) register_backend("nccl", make_nccl_backend);
  });
}

}  // namespace ddp::detail
