# The core's layers, bottom up (docs/ARCHITECTURE.md, "Layers"). Each folder of src/core is one
# layer and one object library, ddp_core_<folder>; "api" is the files at src/core's top. A layer's
# files include the headers of their own folder, of the layers it names here, and the public ones
# (include/ddp), nothing else. internal/<layer>/ holds the headers of a layer that the front, the
# launcher and the tools share with the core, uninstalled: they belong to that layer as its src/core
# folder's do, included as "<layer>/name.h". A layer names only layers above it in this
# list, so no two folders can include each other. ddp_check_layers() checks every include at
# configure time; it also keeps the front (src/torch), the launcher (src/launcher) and the tools
# (src/tools) to the public headers.
cmake_policy(SET CMP0057 NEW)  # IN_LIST, also when run as a script
set(DDP_CORE_LAYERS
  "util:"                                          # strings, log, error kinds, the launcher's variables, Buffer and Work
  "net:util"                                       # sockets
  "store:util net"                                 # the stores: TCP (both wires), hash, file, prefix
  "reduce:"                                        # the reduction kernels
  "op:util reduce"                                 # an operation: its names, checks and fingerprint
  "records:util store op"                          # failure records in the store, flight dumps on disk
  "nccl:util"                                      # CUDA and NCCL: device copies, communicators, the nccl backend
  "group:util net store reduce op records"         # a group's ops: ordering, progress, failures, membership
  "flight:util net op records group"               # the flight recorder, its signal dumps, last words
  "shm:util reduce"                                # one host's shared-memory collectives
  "gloo:util net store reduce op records group flight"  # Gloo between hosts: one part of the cpu backend
  "cpu:util reduce shm gloo"                       # the CPU backend, registered as "gloo": shm on a host, gloo between
  "backends:util group nccl gloo cpu"              # the backend registry, and the one place naming the builtin ones
  "init:util net store op records group flight backends"  # init_process_group, init methods
  "api:util net store reduce op records group flight backends init")  # ProcessGroup

# The layers in order, and what one of them uses.
function(ddp_layer_names out)
  list(TRANSFORM DDP_CORE_LAYERS REPLACE ":.*" "" OUTPUT_VARIABLE _names)
  set(${out} ${_names} PARENT_SCOPE)
endfunction()

function(ddp_layer_uses layer out)
  set(_uses)
  foreach(_entry IN LISTS DDP_CORE_LAYERS)
    if(_entry MATCHES "^${layer}:(.*)$")
      separate_arguments(_uses UNIX_COMMAND "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out} ${_uses} PARENT_SCOPE)
endfunction()

# The quoted includes of `file`.
function(_ddp_quoted_includes file out)
  file(STRINGS ${file} _lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  list(TRANSFORM _lines REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1")
  set(${out} ${_lines} PARENT_SCOPE)
endfunction()

# Fails (FATAL_ERROR, every violation named) when a file under root/src reaches past its layer.
function(ddp_check_layers root)
  set(_errors)
  ddp_layer_names(_layers)
  set(_seen)
  foreach(_layer IN LISTS _layers)
    ddp_layer_uses(${_layer} _uses)
    foreach(_use IN LISTS _uses)
      if(NOT _use IN_LIST _seen)
        list(APPEND _errors "cmake/layers.cmake: layer '${_layer}' uses '${_use}', which is not a layer below it")
      endif()
    endforeach()
    list(APPEND _seen ${_layer})
    if(_layer STREQUAL "api")
      file(GLOB _files ${root}/src/core/*.h ${root}/src/core/*.cpp)
    else()
      file(GLOB _files ${root}/src/core/${_layer}/*.h ${root}/src/core/${_layer}/*.cpp ${root}/internal/${_layer}/*.h)
      # One name, one header: "<layer>/name.h" must not mean two files.
      file(GLOB _shared RELATIVE ${root}/internal/${_layer} ${root}/internal/${_layer}/*.h)
      foreach(_name IN LISTS _shared)
        if(EXISTS ${root}/src/core/${_layer}/${_name})
          list(APPEND _errors "internal/${_layer}/${_name} and src/core/${_layer}/${_name} are both \"${_layer}/${_name}\": "
            "keep one (internal/ for what the front, launcher or tools include too)")
        endif()
      endforeach()
    endif()
    foreach(_file IN LISTS _files)
      _ddp_quoted_includes(${_file} _includes)
      foreach(_include IN LISTS _includes)
        if(_include MATCHES "^ddp/" OR NOT _include MATCHES "/")
          continue()  # public, or beside the file
        endif()
        string(REGEX REPLACE "/.*" "" _folder "${_include}")
        if(_folder STREQUAL _layer OR _folder IN_LIST _uses OR NOT _folder IN_LIST _layers)
          continue()
        endif()
        file(RELATIVE_PATH _rel ${root} ${_file})
        string(CONCAT _error "${_rel}: includes \"${_include}\", a header of layer '${_folder}', which layer "
          "'${_layer}' does not use. A layer uses only layers below it (cmake/layers.cmake): move what both need "
          "down a layer")
        list(APPEND _errors "${_error}")
      endforeach()
    endforeach()
  endforeach()
  # internal/ holds layers' headers only.
  file(GLOB _internal_dirs LIST_DIRECTORIES true RELATIVE ${root}/internal ${root}/internal/*)
  foreach(_dir IN LISTS _internal_dirs)
    if(NOT _dir IN_LIST _layers)
      list(APPEND _errors "internal/${_dir}: not a layer of cmake/layers.cmake; internal/ has one folder per layer")
    endif()
  endforeach()
  # Outside the core, the public headers and internal/'s: what is private to the core stays there.
  foreach(_part torch launcher tools)
    file(GLOB_RECURSE _files ${root}/src/${_part}/*.h ${root}/src/${_part}/*.cpp)
    foreach(_file IN LISTS _files)
      _ddp_quoted_includes(${_file} _includes)
      foreach(_include IN LISTS _includes)
        if(NOT _include MATCHES "^ddp/" AND EXISTS ${root}/src/core/${_include} AND NOT EXISTS ${root}/internal/${_include})
          file(RELATIVE_PATH _rel ${root} ${_file})
          string(CONCAT _error "${_rel}: includes \"${_include}\", a private header of the core (src/core). "
            "src/${_part} builds against include/ddp and internal/ only: use the public API, or move what it "
            "shares with the core to internal/<layer>/")
          list(APPEND _errors "${_error}")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(_errors)
    list(LENGTH _errors _count)
    string(REPLACE ";" "\n  " _text "${_errors}")
    message(FATAL_ERROR "ddp's layers: ${_count} include(s) cross a wall:\n  ${_text}")
  endif()
endfunction()

# cmake -DDDP_ROOT=<tree> -P cmake/layers.cmake: the check alone, on any tree (tests/layers).
if(CMAKE_SCRIPT_MODE_FILE AND CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT DDP_ROOT)
    message(FATAL_ERROR "usage: cmake -DDDP_ROOT=<source tree> -P cmake/layers.cmake")
  endif()
  ddp_check_layers(${DDP_ROOT})
  message(STATUS "ddp's layers: every include stays within its walls")
endif()
