# libzip, for PyTorch's zip format (src/torch/state_dict/zip_archive.cpp): sets DDP_LIBZIP_INCLUDE
# and DDP_LIBZIP_LIBRARY. Found by hand rather than with find_package(libzip): Debian's
# libzip-dev ships a CMake package that fails without the zipcmp, zipmerge and ziptool programs
# (other packages), and ddp needs only the header and the library.
find_path(DDP_LIBZIP_INCLUDE zip.h)
find_library(DDP_LIBZIP_LIBRARY zip)
if(NOT DDP_LIBZIP_INCLUDE OR NOT DDP_LIBZIP_LIBRARY)
  message(FATAL_ERROR "ddp reads and writes PyTorch's zip format with libzip, which is missing: "
    "apt-get install libzip-dev (scripts/setup.sh installs it)")
endif()
