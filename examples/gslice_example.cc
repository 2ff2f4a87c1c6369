// gslice-example: a small CUDA driver-API program that shows what a slice looks like from
// inside. It prints the GPU it sees, allocates 256 MiB chunks until the driver refuses,
// writes a pattern into each with a kernel and reads it back, frees everything and
// allocates again. Exit status 0 only when every check passed.
//
//   gslice run --memory 2GiB -- gslice-example          # on a GPU
//   gslice run --sim --memory 2GiB -- gslice-example    # on the simulated driver
#include <cuda.h>
#include <stdio.h>

#include <vector>

#include "test_support.h"  // LoadTestKernels: the fill kernel, on a real GPU and on the sim

namespace {

constexpr size_t kChunk = 256ull << 20;
constexpr size_t kMaxChunks = 4096;  // 1 TiB: more than any GPU has
constexpr size_t kSampleWords = 16384;

bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  fprintf(stderr, "gslice-example: %s failed: %s\n", what, name != nullptr ? name : "?");
  return false;
}

double GiB(size_t b) { return static_cast<double>(b) / (1ull << 30); }

// Writes pattern into the chunk with the fill kernel, reads back its start, middle and end.
bool FillAndVerify(CUfunction fill, CUdeviceptr p, uint32_t pattern) {
  const uint64_t words = kChunk / 4;
  if (!Ok(gslice::test::LaunchFill(fill, p, pattern, words, nullptr), "fill kernel launch")) return false;
  if (!Ok(cuCtxSynchronize(), "cuCtxSynchronize")) return false;
  std::vector<uint32_t> host(kSampleWords);
  const uint64_t offsets[] = {0, words / 2, words - kSampleWords};
  for (uint64_t off : offsets) {
    if (!Ok(cuMemcpyDtoH(host.data(), p + off * 4, kSampleWords * 4), "cuMemcpyDtoH")) return false;
    for (uint32_t v : host) {
      if (v != pattern) {
        fprintf(stderr, "gslice-example: read back 0x%08x, wrote 0x%08x\n", v, pattern);
        return false;
      }
    }
  }
  return true;
}

int Run() {
  CUdevice dev;
  CUcontext ctx;
  if (!Ok(cuInit(0), "cuInit") || !Ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !Ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") || !Ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent")) {
    return 1;
  }
  char name[256] = {};
  size_t total = 0, free_b = 0, dev_total = 0;
  cuDeviceGetName(name, sizeof name, dev);
  if (!Ok(cuDeviceTotalMem(&dev_total, dev), "cuDeviceTotalMem") || !Ok(cuMemGetInfo(&free_b, &total), "cuMemGetInfo")) return 1;
  printf("GPU 0: %s, %.2f GiB total, %.2f GiB free\n", name, GiB(total), GiB(free_b));

  CUmodule module;
  CUfunction busy, fill;
  if (!Ok(gslice::test::LoadTestKernels(&module, &busy, &fill), "loading the test kernels")) return 1;

  std::vector<CUdeviceptr> chunks;
  CUresult r = CUDA_SUCCESS;
  while (chunks.size() < kMaxChunks) {
    CUdeviceptr p = 0;
    r = cuMemAlloc(&p, kChunk);
    if (r != CUDA_SUCCESS) break;
    chunks.push_back(p);
  }
  if (r != CUDA_ERROR_OUT_OF_MEMORY) {
    Ok(r, "allocating until the driver refuses (expected CUDA_ERROR_OUT_OF_MEMORY)");
    return 1;
  }
  printf("allocated %zu chunks of 256 MiB (%.2f GiB) before CUDA_ERROR_OUT_OF_MEMORY\n", chunks.size(),
         GiB(chunks.size() * kChunk));
  size_t free_full = 0;
  if (!Ok(cuMemGetInfo(&free_full, &total), "cuMemGetInfo")) return 1;
  if (free_full >= kChunk) {
    fprintf(stderr, "gslice-example: %.2f GiB still reported free after a 256 MiB allocation was refused\n",
            GiB(free_full));
    return 1;
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!FillAndVerify(fill, chunks[i], 0xA5000000u | static_cast<uint32_t>(i))) return 1;
  }
  printf("wrote and verified a pattern in every chunk\n");
  const size_t count = chunks.size();
  for (CUdeviceptr p : chunks)
    if (!Ok(cuMemFree(p), "cuMemFree")) return 1;
  chunks.clear();
  for (size_t i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    if (!Ok(cuMemAlloc(&p, kChunk), "allocating again after freeing everything")) return 1;
    chunks.push_back(p);
  }
  for (CUdeviceptr p : chunks)
    if (!Ok(cuMemFree(p), "cuMemFree")) return 1;
  printf("freed everything and allocated the same %zu chunks again\n", count);
  cuModuleUnload(module);
  cuDevicePrimaryCtxRelease(dev);
  printf("gslice-example: all checks passed\n");
  return 0;
}

}  // namespace

int main() { return Run(); }
