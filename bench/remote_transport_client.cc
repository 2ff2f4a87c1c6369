// The client side of bench/remote_transport.cc: a driver-API program run through the
// forwarding libcuda.so.1 (gslice run --remote). It prints "ready", then for each line on stdin
//   rt N            N cuCtxSynchronize with nothing queued (one round trip each)
//   async N         N cuMemsetD32Async of one word (queued), then one cuStreamSynchronize
//   htod BYTES N    N cuMemcpyHtoD of BYTES
//   dtoh BYTES N    N cuMemcpyDtoH of BYTES
// prints the nanoseconds they took and the process's CPU nanoseconds meanwhile (or
// "error NAME"). Everything is set up before "ready".
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <string>
#include <vector>

namespace {

unsigned long long NowNs(clockid_t clock = CLOCK_MONOTONIC) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<unsigned long long>(t.tv_sec) * 1000000000ull + static_cast<unsigned long long>(t.tv_nsec);
}

const char* Name(CUresult r) {
  const char* n = nullptr;
  return cuGetErrorName(r, &n) == CUDA_SUCCESS && n != nullptr ? n : "?";
}

}  // namespace

int main() {
  constexpr size_t kMaxBytes = 64ull << 20;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUdeviceptr d = 0;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, 0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
  if (r == CUDA_SUCCESS) r = cuMemAlloc(&d, kMaxBytes);
  if (r != CUDA_SUCCESS) {
    printf("error %s\n", Name(r));
    return 1;
  }
  std::vector<unsigned char> host(kMaxBytes, 1);
  printf("ready\n");
  fflush(stdout);
  char line[256];
  while (fgets(line, sizeof line, stdin) != nullptr) {
    char what[32] = {};
    unsigned long long a = 0, b = 0;
    const int got = sscanf(line, "%31s %llu %llu", what, &a, &b);
    if (got < 2) continue;
    const std::string op = what;
    r = CUDA_SUCCESS;
    const unsigned long long start = NowNs();
    const unsigned long long cpu_start = NowNs(CLOCK_PROCESS_CPUTIME_ID);
    if (op == "rt") {
      for (unsigned long long i = 0; i < a && r == CUDA_SUCCESS; ++i) r = cuCtxSynchronize();
    } else if (op == "async") {
      for (unsigned long long i = 0; i < a && r == CUDA_SUCCESS; ++i) {
        r = cuMemsetD32Async(d + (i % 1024) * 4, static_cast<unsigned int>(i), 1, nullptr);
      }
      if (r == CUDA_SUCCESS) r = cuStreamSynchronize(nullptr);
    } else if (op == "htod" && got == 3 && a <= kMaxBytes) {
      for (unsigned long long i = 0; i < b && r == CUDA_SUCCESS; ++i) r = cuMemcpyHtoD(d, host.data(), a);
    } else if (op == "dtoh" && got == 3 && a <= kMaxBytes) {
      for (unsigned long long i = 0; i < b && r == CUDA_SUCCESS; ++i) r = cuMemcpyDtoH(host.data(), d, a);
    } else {
      printf("error unknown\n");
      fflush(stdout);
      continue;
    }
    const unsigned long long took = NowNs() - start;
    const unsigned long long cpu = NowNs(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
    if (r != CUDA_SUCCESS) {
      printf("error %s\n", Name(r));
    } else {
      printf("%llu %llu\n", took, cpu);
    }
    fflush(stdout);
  }
  return 0;
}
