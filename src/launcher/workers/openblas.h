// OpenBLAS's kernels for the workers. Debian 12's OpenBLAS (0.3.21) does not know some CPUs by
// name (a VM's "Intel(R) Xeon(R) Processor") and falls back to its Prescott kernels even where
// the CPU has AVX-512: LibTorch 1.13's matrix products then run 3x slower (docs/LAUNCHER.md).
// ddprun asks this machine's OpenBLAS which kernels it chose and, where it fell back below the
// CPU's vector units, gives the workers OPENBLAS_CORETYPE, which OpenBLAS reads as it loads.
#pragma once

#include <optional>
#include <string>

namespace ddp::launcher {

struct CpuVectors {
  bool avx2_fma = false;  // AVX2 and FMA: OpenBLAS's Haswell kernels
  bool avx512 = false;    // AVX-512 F, BW, DQ and VL: its SkylakeX kernels
};

// The OPENBLAS_CORETYPE for an OpenBLAS that chose `chosen` (openblas_get_corename(), any case)
// on a CPU with `cpu`: SkylakeX or Haswell when `chosen` is a core without AVX (its fallbacks
// among them), none when it chose well or the CPU has nothing better.
std::optional<std::string> openblas_coretype_for(const std::string& chosen, const CpuVectors& cpu);

// This machine's answer: OpenBLAS (libopenblas.so.0) loaded for a moment and asked, and the
// CPU's vector units. None without OpenBLAS. `chosen` gets what OpenBLAS chose, for the note.
std::optional<std::string> openblas_coretype_here(std::string* chosen = nullptr);

}  // namespace ddp::launcher
