# Gloo, the transport of the gloo backend between hosts (docs/GLOO.md), in one of two ways:
#   PRIVATE  Gloo's source (DDP_GLOO_SOURCE_DIR; scripts/private_gloo.sh fetches Debian's) compiled
#            into ddp_core with hidden symbols, with one fix to its TCP pair (below);
#   SYSTEM   Debian's shared libgloo, the one Debian's LibTorch links itself.
# An upstream LibTorch (PyPI's wheel, pytorch.org's zip) carries a Gloo of its own and exports its
# symbols, interposable: two Gloos that see each other bind into each other whichever the loader
# meets first. A private Gloo (hidden, and in a namespace of its own) is reachable from ddp's code
# only, and reaches nothing else. AUTO (the default) picks PRIVATE whenever Gloo's source is at
# hand (scripts/setup.sh fetches it), since only the private Gloo has the fix; without the source,
# SYSTEM where the LibTorch being built against links Debian's libgloo (with a warning), else an
# error that says how to fetch it.
#
# ddp_gloo(TARGET) adds ddp's Gloo-using sources (src/core/gloo/), and the private Gloo's, to
# TARGET; sets DDP_GLOO_MODE (SYSTEM or PRIVATE) in the caller's scope.
set(DDP_GLOO AUTO CACHE STRING "Gloo: SYSTEM (Debian's libgloo), PRIVATE (compiled into ddp from DDP_GLOO_SOURCE_DIR), or AUTO")
set_property(CACHE DDP_GLOO PROPERTY STRINGS AUTO SYSTEM PRIVATE)
set(DDP_GLOO_SOURCE_DIR "" CACHE PATH "Gloo's source tree for DDP_GLOO=PRIVATE (scripts/private_gloo.sh prints one)")

# Whether the LibTorch found loads the system's libgloo: its libtorch_cpu lists it as a needed
# library. Debian's does; upstream ones carry their own Gloo.
function(_ddp_torch_needs_system_gloo out)
  set(${out} FALSE PARENT_SCOPE)
  ddp_torch_cpu_library(_library)
  if(NOT _library OR NOT CMAKE_OBJDUMP)
    return()
  endif()
  execute_process(COMMAND ${CMAKE_OBJDUMP} -p "${_library}" OUTPUT_VARIABLE _headers ERROR_QUIET)
  if(_headers MATCHES "NEEDED +libgloo\\.so")
    set(${out} TRUE PARENT_SCOPE)
  endif()
endfunction()

# Gloo's source where none was named: the newest that scripts/private_gloo.sh unpacked.
if(NOT DDP_GLOO_SOURCE_DIR AND NOT DDP_GLOO STREQUAL "SYSTEM")
  ddp_cache_dir(_cache)
  file(GLOB _found LIST_DIRECTORIES TRUE "${_cache}/gloo-src-*")
  if(_found)
    list(SORT _found)
    list(POP_BACK _found _newest)
    set(DDP_GLOO_SOURCE_DIR "${_newest}" CACHE PATH "Gloo's source tree for DDP_GLOO=PRIVATE" FORCE)
  endif()
endif()
set(_ddp_gloo_source_found FALSE)
if(EXISTS "${DDP_GLOO_SOURCE_DIR}/gloo/rendezvous/context.h")
  set(_ddp_gloo_source_found TRUE)
endif()

set(DDP_GLOO_MODE ${DDP_GLOO})
if(DDP_GLOO_MODE STREQUAL "AUTO")
  set(DDP_GLOO_MODE PRIVATE)
  if(NOT _ddp_gloo_source_found)
    set(_system TRUE)  # the core alone: Debian's libgloo is fine to link
    if(DDP_BUILD_TORCH)
      _ddp_torch_needs_system_gloo(_system)
    endif()
    if(_system)
      set(DDP_GLOO_MODE SYSTEM)
      message(WARNING "ddp: no Gloo source at hand, so ddp links Debian's libgloo, whose TCP pair leaves a send in "
        "flight to a failed peer to end at the timeout (docs/GLOO.md). scripts/private_gloo.sh fetches the source "
        "(scripts/setup.sh runs it); configure again to compile ddp's own, fixed Gloo.")
    endif()
  endif()
endif()
if(NOT DDP_GLOO_MODE MATCHES "^(SYSTEM|PRIVATE)$")
  message(FATAL_ERROR "DDP_GLOO=${DDP_GLOO}: use AUTO, SYSTEM or PRIVATE")
endif()

if(DDP_GLOO_MODE STREQUAL "PRIVATE")
  if(NOT _ddp_gloo_source_found)
    message(FATAL_ERROR "ddp needs a private Gloo here (DDP_GLOO=${DDP_GLOO}): Debian's libgloo leaves a send in flight "
      "to a failed peer to end at the timeout, and an upstream LibTorch carries a Gloo of its own, which must not meet "
      "Debian's libgloo in one process (docs/GLOO.md). Fetch Gloo's source with "
      "scripts/private_gloo.sh (Debian's source package) and configure again, or pass -DDDP_GLOO_SOURCE_DIR=<a Gloo "
      "source tree>. (DDP_GLOO_SOURCE_DIR='${DDP_GLOO_SOURCE_DIR}' has no gloo/rendezvous/context.h)")
  endif()
  message(STATUS "ddp: gloo PRIVATE, compiled into ddp_core with hidden symbols from ${DDP_GLOO_SOURCE_DIR}")
else()
  find_package(Gloo REQUIRED)
  message(STATUS "ddp: gloo SYSTEM (Debian's libgloo)")
endif()

function(ddp_gloo target)
  set(_dir ${PROJECT_SOURCE_DIR}/src/core)
  # Hidden: nothing outside ddp binds to ddp's Gloo or to the Gloo code ddp's sources instantiate.
  add_library(${target}_gloo OBJECT ${_dir}/gloo/gloo_backend.cpp ${_dir}/gloo/doubling.cpp ${_dir}/gloo/termination.cpp
    ${_dir}/gloo/binding.cpp ${_dir}/gloo/device.cpp ${_dir}/gloo/store_adapter.cpp)
  set_target_properties(${target}_gloo PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(${target}_gloo PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/internal ${_dir})
  if(DDP_GLOO_MODE STREQUAL "PRIVATE")
    set(_gloo ${DDP_GLOO_SOURCE_DIR}/gloo)
    set(_sources)
    foreach(_name algorithm allgather allgatherv allreduce allreduce_local alltoall alltoallv barrier broadcast context
                  gather gatherv reduce scatter types
                  common/linux common/logging common/utils
                  rendezvous/context rendezvous/file_store rendezvous/hash_store rendezvous/prefix_store rendezvous/store
                  transport/address transport/buffer transport/context transport/device transport/pair
                  transport/unbound_buffer
                  transport/tcp/address transport/tcp/buffer transport/tcp/context transport/tcp/device
                  transport/tcp/error transport/tcp/listener transport/tcp/loop transport/tcp/pair transport/tcp/socket
                  transport/tcp/unbound_buffer)
      list(APPEND _sources ${_gloo}/${_name}.cc)
    endforeach()
    # gloo/config.h as Gloo's own CMake would make it: the TCP transport, nothing else.
    set(_config ${CMAKE_CURRENT_BINARY_DIR}/private_gloo/gloo/config.h)
    file(WRITE ${_config}.in "#pragma once\n#define GLOO_VERSION_MAJOR 0\n#define GLOO_VERSION_MINOR 5\n"
      "#define GLOO_VERSION_PATCH 0\n#define GLOO_VERSION 500\n")
    foreach(_flag USE_CUDA USE_NCCL USE_ROCM USE_RCCL USE_REDIS USE_IBVERBS USE_MPI USE_AVX USE_LIBUV
                  HAVE_TRANSPORT_TCP_TLS HAVE_TRANSPORT_IBVERBS HAVE_TRANSPORT_UV)
      file(APPEND ${_config}.in "#define GLOO_${_flag} 0\n")
    endforeach()
    file(APPEND ${_config}.in "#define GLOO_HAVE_TRANSPORT_TCP 1\n")
    configure_file(${_config}.in ${_config} COPYONLY)
    # One fix to Gloo's TCP pair: when a pair fails, an unbound buffer's send already in its write
    # queue is failed too (Gloo fails only bound buffers there), so that a rank blocked writing to a
    # neighbour that failed ends at once instead of at its timeout (docs/RELIABILITY.md). Compiled
    # from a patched copy; a Gloo whose pair.cc reads otherwise is compiled as it is, with a warning.
    set(_pair ${_gloo}/transport/tcp/pair.cc)
    file(READ ${_pair} _pair_text)
    set(_unfixed "    if (op.buf != nullptr) {\n      op.buf->signalException(ex);\n    }\n")
    string(FIND "${_pair_text}" "${_unfixed}" _at)
    if(_at GREATER -1)
      string(REPLACE "${_unfixed}" "${_unfixed}    NonOwningPtr<UnboundBuffer> ubuf(op.ubuf);  // ddp: cmake/gloo.cmake\n    if (ubuf) {\n      ubuf->signalException(ex);\n    }\n" _pair_text "${_pair_text}")
      set(_patched ${CMAKE_CURRENT_BINARY_DIR}/private_gloo/gloo/transport/tcp/pair.cc)
      file(WRITE ${_patched}.in "${_pair_text}")
      configure_file(${_patched}.in ${_patched} COPYONLY)
      list(REMOVE_ITEM _sources ${_pair})
      list(APPEND _sources ${_patched})
    else()
      message(WARNING "ddp: this Gloo's transport/tcp/pair.cc is not the one ddp patches; a send in flight to a "
        "failed peer then ends at the timeout")
    endif()
    target_sources(${target}_gloo PRIVATE ${_sources})
    # Third-party code: its own warnings are not ddp's to fix.
    set_source_files_properties(${_sources} PROPERTIES COMPILE_OPTIONS "-w")
    target_include_directories(${target}_gloo SYSTEM PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/private_gloo ${DDP_GLOO_SOURCE_DIR})
    # And under a name of its own: the standard library's templates that Gloo instantiates with
    # its types (a thread running its loop, say) are exported whatever Gloo's visibility; named
    # ddp_gloo, they cannot be the same symbols as another Gloo's.
    target_compile_definitions(${target}_gloo PRIVATE DDP_GLOO_PRIVATE=1 gloo=ddp_gloo)
  else()
    target_link_libraries(${target}_gloo PRIVATE gloo)
    target_link_libraries(${target} PRIVATE gloo)
  endif()
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:${target}_gloo>)
endfunction()
