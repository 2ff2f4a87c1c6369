// The test kernels for real GPUs, compiled to PTX at build time (tests/support/CMakeLists.txt)
// and embedded into gslice_test_support. The simulated driver implements the same two
// kernels, with the same names and parameters, in its own image format (SimTestImage()).
#include <stdint.h>

// Keeps the device busy for `microseconds`, timed by the global nanosecond timer.
// Launch with a single thread block.
extern "C" __global__ void gslice_busy(uint64_t microseconds) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  const uint64_t end = start + microseconds * 1000ull;
  uint64_t now = start;
  while (now < end) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

// Writes `pattern` into dst[0..count). Any launch shape works (grid-stride loop).
extern "C" __global__ void gslice_fill(uint32_t* dst, uint32_t pattern, uint64_t count) {
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = pattern;
  }
}
