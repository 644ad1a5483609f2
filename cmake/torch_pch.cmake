# <torch/torch.h> precompiled once per kind of target instead of parsed by every LibTorch
# translation unit (about half of such a unit's compile time). GCC accepts a precompiled header
# only under the flags it was made with (-fPIC or -fPIE, the -g level, the sanitizers, macros the
# header reads), so there are two: the library's own (ddp_torch, -fPIC -g), and ddp_torch_pch's,
# made with the flags of everything built after -g1 (tests, benchmarks, examples), which those
# executables reuse. A header that does not fit is ignored with a -Winvalid-pch warning, never an
# error: the build stays correct, only slower.
option(DDP_PRECOMPILE_TORCH "Precompile <torch/torch.h> for the LibTorch targets" ON)

# The executables' shared header. Call after add_compile_options(-g1), before the targets that use it.
function(ddp_add_torch_pch)
  if(NOT DDP_PRECOMPILE_TORCH OR NOT TARGET ddp_torch OR TARGET ddp_torch_pch)
    return()
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/ddp_torch_pch.cpp "// The translation unit that makes ddp_torch_pch's precompiled header.\n")
  add_library(ddp_torch_pch OBJECT ${CMAKE_BINARY_DIR}/ddp_torch_pch.cpp)
  target_link_libraries(ddp_torch_pch PRIVATE ddp::torch)
  # Compiled as the executables are (-fPIE), not as an object library would be (-fPIC).
  set_target_properties(ddp_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(ddp_torch_pch PRIVATE -fPIE)
  target_precompile_headers(ddp_torch_pch PRIVATE <torch/torch.h>)
endfunction()

# For an executable built with the default flags: reuse the shared header.
function(ddp_use_torch_pch target)
  if(TARGET ddp_torch_pch)
    target_precompile_headers(${target} REUSE_FROM ddp_torch_pch)
  endif()
endfunction()
