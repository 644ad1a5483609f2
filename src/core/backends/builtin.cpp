// Registers the backends that ship with ddp. The one place that names them.
#include <mutex>

#include "backends/registry.h"
#include "gloo/binding.h"
#include "gloo/gloo_backend.h"
#include "nccl/device_copy.h"
#include "nccl/nccl_backend.h"
#include "cpu/cpu_backend.h"

namespace ddp::detail {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    // A user's own registration under the same name wins. "gloo" is the CPU backend: Gloo between
    // hosts, shared memory within one (cpu/cpu_backend.h; DDP_SHM=0: Gloo alone). Its check: ddp's
    // Gloo calls must land in the Gloo it was built with (gloo/binding.h).
    if (!is_backend_registered("gloo")) {
      register_backend("gloo", BackendRegistration{.factory = make_cpu_backend,
                                                   .accepts = [](const Device& d) { return d.is_cpu(); },
                                                   .check_usable = check_gloo_binding});
    }
    // nccl's check: NCCL in this build (the stub's message says what to install), a GPU, the one
    // LOCAL_RANK names. Its copy reaches CUDA memory.
    if (!is_backend_registered("nccl")) {
      register_backend("nccl", BackendRegistration{.factory = make_nccl_backend,
                                                   .accepts = [](const Device& d) { return d.is_cuda(); },
                                                   .check_usable = check_nccl_usable,
                                                   .copy = copy_buffer});
    }
  });
}

std::string default_backend_spec(bool cuda_available) { return cuda_available ? "cpu:gloo,cuda:nccl" : "gloo"; }

// By the device, not by nccl's usability check: a GPU job that cannot use its GPU (a LOCAL_RANK
// beyond the visible ones) must fail with the reason, not quietly become a CPU job.
std::string default_backend_spec() { return default_backend_spec(cuda_available()); }

std::vector<VariableInfo> builtin_backend_variables() { return cpu_backend_variables(); }

}  // namespace ddp::detail
