#include "workers/worker_notes.h"

#include "util/strings.h"
#include "workers/openblas.h"
#include "workers/worker_env.h"

namespace ddp::launcher {

std::optional<std::string> say_worker_notes(const EnvLookup& parent, int nproc,
                                            const std::function<void(const std::string&)>& say) {
  if (needs_omp_default(parent, nproc)) {
    say("note: setting OMP_NUM_THREADS=1 for each worker (as torchrun does: more than one worker per node and "
        "OMP_NUM_THREADS is unset), to keep the machine from being overloaded; set it yourself to tune it");
  }
  if (parent("OPENBLAS_CORETYPE")) return std::nullopt;
  std::string chosen;
  std::optional<std::string> coretype = openblas_coretype_here(&chosen);
  if (coretype) {
    say(detail::cat("note: setting OPENBLAS_CORETYPE=", *coretype,
                    " for each worker: this machine's OpenBLAS "
                    "does not know its CPU and chose its ",
                    chosen,
                    " kernels, without the CPU's vector units (matrix "
                    "products about 3x slower); set OPENBLAS_CORETYPE yourself to choose"));
  }
  return coretype;
}

}  // namespace ddp::launcher
