# Debian 12's CMake (3.25.1) fails in FindCUDAToolkit with a CUDA toolkit that ships no nvToolsExt
# library (CUDA 12.9 and later keep only the header-only nvtx3): for a project that requires 3.25
# it sets a deprecation property on CUDA::nvToolsExt without checking that the target exists
# ("set_property could not find TARGET CUDA::nvToolsExt"), later CMakes check. An empty stand-in,
# made only where the library is missing, lets the module run for ddp and for LibTorch's own
# CMake files; nothing links it.
if(CMAKE_VERSION VERSION_LESS 3.26 AND NOT TARGET CUDA::nvToolsExt)
  find_library(DDP_NVTOOLSEXT_LIBRARY nvToolsExt
    HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH)
  if(NOT DDP_NVTOOLSEXT_LIBRARY)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED GLOBAL)
  endif()
endif()
