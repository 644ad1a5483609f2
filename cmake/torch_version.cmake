# Which LibTorch ddp is being built against, and whether it is one ddp supports: Debian 12's 1.13
# and upstream 2.0 and later, tested up to DDP_NEWEST_TESTED_TORCH (CI builds and tests both
# ends: docs/LIBTORCH.md). Sets DDP_TORCH_VERSION.
set(DDP_NEWEST_TESTED_TORCH 2.15.0)
set(DDP_TORCH_VERSION "${Torch_VERSION}")
if(NOT DDP_TORCH_VERSION)
  set(DDP_TORCH_VERSION "${PACKAGE_VERSION}")
endif()
# The file of LibTorch's torch_cpu library, from its imported target (TORCH_LIBRARY may name another
# LibTorch: TorchConfig.cmake's find_library searches the system's folders before its own).
function(ddp_torch_cpu_library out)
  set(${out} "" PARENT_SCOPE)
  if(NOT TARGET torch_cpu)
    return()
  endif()
  get_target_property(_configs torch_cpu IMPORTED_CONFIGURATIONS)
  foreach(_config ${_configs} NOCONFIG)
    get_target_property(_location torch_cpu IMPORTED_LOCATION_${_config})
    if(_location)
      set(${out} "${_location}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  get_target_property(_location torch_cpu IMPORTED_LOCATION)
  if(_location)
    set(${out} "${_location}" PARENT_SCOPE)
  endif()
endfunction()
ddp_torch_cpu_library(_ddp_torch_cpu)
get_filename_component(_ddp_torch_dir "${_ddp_torch_cpu}" DIRECTORY)

if(DDP_TORCH_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "ddp needs LibTorch 1.13 or later; the one found (${_ddp_torch_dir}) is ${DDP_TORCH_VERSION}. "
    "Install Debian's libtorch-dev (1.13) or point CMAKE_PREFIX_PATH at an upstream LibTorch 2.x "
    "(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)', or an unpacked LibTorch zip).")
endif()
if(DDP_TORCH_VERSION VERSION_LESS 2.0 AND NOT _ddp_torch_dir MATCHES "^/usr/lib")
  message(WARNING "ddp: LibTorch ${DDP_TORCH_VERSION} at ${_ddp_torch_dir} is an upstream LibTorch older than 2.0: "
    "untested. ddp is tested against Debian 12's LibTorch 1.13.1 and upstream 2.x up to ${DDP_NEWEST_TESTED_TORCH}; "
    "use one of those.")
endif()
if(DDP_TORCH_VERSION VERSION_GREATER DDP_NEWEST_TESTED_TORCH)
  message(WARNING "ddp: LibTorch ${DDP_TORCH_VERSION} is newer than the newest ddp is tested against "
    "(${DDP_NEWEST_TESTED_TORCH}). It is likely to work; if it does not compile or a test fails, the differences "
    "belong in src/torch/compat/torch_compat.h.")
endif()
# The pre-C++11 std::string ABI (older LibTorch zips, "pre-cxx11"): ddp's other C++ dependencies
# (GoogleTest, Google Benchmark, Debian's Gloo) use the C++11 ABI, so nothing would link.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR "The LibTorch at ${_ddp_torch_dir} uses the pre-C++11 std::string ABI "
    "(TORCH_CXX_FLAGS: ${TORCH_CXX_FLAGS}); ddp and its other C++ dependencies use the C++11 ABI. Use the "
    "'cxx11 ABI' LibTorch download or PyPI's torch (C++11 ABI since 2.7).")
endif()
message(STATUS "ddp: LibTorch ${DDP_TORCH_VERSION} at ${_ddp_torch_dir}")

# LibTorch's own files find libc10 with find_library, which searches the system's folders before
# LibTorch's: with Debian's libtorch-dev installed, an upstream LibTorch's TORCH_LIBRARIES names
# Debian's libc10.so beside its own libraries. Use its own.
set(_ddp_torch_libraries)
foreach(_library ${TORCH_LIBRARIES})
  get_filename_component(_name "${_library}" NAME)
  if(IS_ABSOLUTE "${_library}" AND EXISTS "${_ddp_torch_dir}/${_name}" AND NOT _library STREQUAL "${_ddp_torch_dir}/${_name}")
    message(STATUS "ddp: LibTorch's TORCH_LIBRARIES named ${_library}; using ${_ddp_torch_dir}/${_name}")
    set(_library "${_ddp_torch_dir}/${_name}")
  endif()
  list(APPEND _ddp_torch_libraries "${_library}")
endforeach()
set(TORCH_LIBRARIES ${_ddp_torch_libraries})
