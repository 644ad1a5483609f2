# The libraries and the LibTorch test executables compile as unity sources, 8 files each
# (DDP_UNITY_BUILD, default ON): their units instantiate the same LibTorch and GoogleTest templates
# over and over, which a unity source does once (measured: ddp_torch from 16.7 to under 4 CPU
# minutes, the LibTorch tests from 14 to 5, ddp_core from 3.6 to 1.4, which the sanitizer builds
# compile again). The files of one target then share a translation
# unit, so their file-local helpers need distinct names: a clash is a compile error, and an
# overload that takes over another's calls shows as -Wunused-function. (The core and launcher
# tests, small to build, repeat helper names and stay one unit per file.)
option(DDP_UNITY_BUILD "Compile the libraries and the LibTorch test executables as unity sources" ON)
function(ddp_unity_build target)
  if(DDP_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
