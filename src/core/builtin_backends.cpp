// Registers the backends that ship with ddp. The one place that names them.
#include <mutex>

#include "backend_registry.h"
#include "gloo/binding.h"
#include "gloo/gloo_backend.h"
#include "nccl/nccl_backend.h"
#include "cpu/cpu_backend.h"

namespace ddp::detail {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A user's own registration under the same name wins. "gloo" is the CPU backend: Gloo between
    // hosts, shared memory within one (cpu/cpu_backend.h; DDP_SHM=0: Gloo alone).
    if (!is_backend_registered("gloo"))
      register_backend("gloo", make_cpu_backend, [](const Device& d) { return d.is_cpu(); });
    if (!is_backend_registered("nccl"))
      register_backend("nccl", make_nccl_backend, [](const Device& d) { return d.is_cuda(); });
  });
}

void check_backend_usable(const std::string& name) {
  if (name == "nccl") check_nccl_usable();
  if (name == "gloo") check_gloo_binding();  // ddp's Gloo calls must land in the Gloo it was built with
}

}  // namespace ddp::detail
