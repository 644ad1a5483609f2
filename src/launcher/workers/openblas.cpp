#include "workers/openblas.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "util/strings.h"

namespace ddp::launcher {

std::optional<std::string> openblas_coretype_for(const std::string& chosen, const CpuVectors& cpu) {
  // OpenBLAS's x86 cores before AVX: an unknown CPU lands on one of these (Prescott for Intel's).
  static constexpr std::array<std::string_view, 13> kBeforeAvx = {
      "unknown", "katmai", "coppermine", "northwood", "prescott", "banias",   "atom",
      "core2",   "penryn", "dunnington", "nehalem",   "opteron",  "barcelona"};
  const std::string name = detail::lower(chosen);
  if (std::find(kBeforeAvx.begin(), kBeforeAvx.end(), name) == kBeforeAvx.end()) return std::nullopt;
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return std::nullopt;
}

std::optional<std::string> openblas_coretype_here(std::string* chosen) {
  void* library = ::dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return std::nullopt;
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(::dlsym(library, "openblas_get_corename"));
  const char* name = core_name ? core_name() : nullptr;
  const std::string core = name ? name : "";
  ::dlclose(library);
  if (core.empty()) return std::nullopt;
  if (chosen) *chosen = core;
  __builtin_cpu_init();
  CpuVectors cpu;
  cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return openblas_coretype_for(core, cpu);
}

}  // namespace ddp::launcher
