# Finds the CUDA toolkit's headers (cuda.h) and driver stub. The toolkit is a documented
# prerequisite (README, "Prerequisites"); nothing here links the real driver.
set(GSLICE_CUDA_HOME "$ENV{CUDA_HOME}" CACHE PATH "CUDA toolkit root (holds include/cuda.h)")
find_path(GSLICE_CUDA_INCLUDE_DIR cuda.h
  HINTS ${GSLICE_CUDA_HOME}/include /usr/local/cuda/include /usr/include
  NO_CACHE)
if(NOT GSLICE_CUDA_INCLUDE_DIR)
  message(FATAL_ERROR
    "cuda.h not found. gslice builds against the CUDA toolkit's headers:\n"
    "  install the CUDA toolkit (for example NVIDIA's cuda-toolkit package, which puts it in\n"
    "  /usr/local/cuda), or point CUDA_HOME at a toolkit root that holds include/cuda.h.")
endif()
get_filename_component(GSLICE_CUDA_ROOT ${GSLICE_CUDA_INCLUDE_DIR} DIRECTORY)
find_file(GSLICE_CUDA_DRIVER_STUB libcuda.so
  HINTS ${GSLICE_CUDA_ROOT}/lib64/stubs ${GSLICE_CUDA_ROOT}/lib/stubs
        ${GSLICE_CUDA_ROOT}/targets/x86_64-linux/lib/stubs
  NO_DEFAULT_PATH NO_CACHE)
if(NOT GSLICE_CUDA_DRIVER_STUB)
  message(FATAL_ERROR "The CUDA toolkit at ${GSLICE_CUDA_ROOT} has no lib64/stubs/libcuda.so; "
                      "gslice reads the driver's export list from it.")
endif()
file(STRINGS ${GSLICE_CUDA_INCLUDE_DIR}/cuda.h _cuda_version_line REGEX "^#define CUDA_VERSION ")
string(REGEX MATCH "[0-9]+" GSLICE_CUDA_VERSION "${_cuda_version_line}")
message(STATUS "CUDA headers: ${GSLICE_CUDA_INCLUDE_DIR} (CUDA_VERSION ${GSLICE_CUDA_VERSION})")
find_program(GSLICE_NVCC nvcc HINTS ${GSLICE_CUDA_ROOT}/bin NO_CACHE)

# Driver API headers only: an interface target, no library to link.
add_library(gslice_cuda_headers INTERFACE)
target_include_directories(gslice_cuda_headers SYSTEM INTERFACE ${GSLICE_CUDA_INCLUDE_DIR})

# Programs written against the driver API link the toolkit's stub (SONAME libcuda.so.1);
# at run time the loader finds whichever libcuda.so.1 the environment gives: the simulated
# driver in tests, the real one on a GPU machine, the gslice shim in front of either.
add_library(gslice_cuda_driver INTERFACE)
target_link_libraries(gslice_cuda_driver INTERFACE gslice_cuda_headers ${GSLICE_CUDA_DRIVER_STUB})
