// suspend_client: a driver-API program the suspend sim tests run under the shim. It holds
// device memory with a known pattern and obeys commands on stdin, one per line:
//   call          one hooked call (cuMemAlloc_v2 + cuMemFree_v2 of 4 KiB); prints
//                 "called <seconds> <result>" - the seconds it took (the resume gate's delay)
//   sync          cuCtxSynchronize; prints "synced <seconds> <result>"
//   alloc BYTES   cuMemAlloc_v2; prints "alloc <result>" and keeps the memory
//   free          frees what `alloc` took; prints "freed"
//   freeone       cuMemFree_v2 of the last `alloc`; prints "freedone <seconds> <result>"
//   hostalloc     cuMemHostAlloc + cuMemFreeHost of 4 KiB (generated trampolines, no hooks);
//                 prints "hostalloc <seconds> <result>"
//   pa-freeone, pa-hostalloc   the same through pointers cuGetProcAddress handed out at start
//                 (the reply starts with the command's own word, "freedone" / "hostalloc")
//   verify        reads the held memory back; prints "verified ok" or "verified bad"
//   exit          frees everything and exits 0
// Started as: suspend_client BYTES PATTERN; prints "ready <pid>" once the memory is held.
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gslice/clock.h"

namespace {

void* g_cuda = nullptr;

template <typename F>
F Sym(const char* name) {
  void* p = dlsym(g_cuda, name);
  if (p == nullptr) {
    fprintf(stderr, "suspend_client: no symbol %s\n", name);
    exit(1);
  }
  return reinterpret_cast<F>(p);
}

#define FN(name) static auto name = Sym<decltype(&::name)>(#name)

const char* Name(CUresult r) {
  FN(cuGetErrorName);
  const char* s = nullptr;
  return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : "CUDA_ERROR_UNKNOWN";
}

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "suspend_client: %s failed: %s\n", what, Name(r));
    exit(1);
  }
}

// MonotonicNs in seconds.
double Now() { return static_cast<double>(gslice::MonotonicNs()) * 1e-9; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: suspend_client BYTES PATTERN\n");
    return 2;
  }
  const size_t bytes = strtoull(argv[1], nullptr, 0) / 4 * 4;
  const unsigned pattern = static_cast<unsigned>(strtoul(argv[2], nullptr, 0));
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (g_cuda == nullptr) {
    fprintf(stderr, "suspend_client: dlopen libcuda.so.1: %s\n", dlerror());
    return 1;
  }
  FN(cuInit);
  FN(cuDeviceGet);
  FN(cuDevicePrimaryCtxRetain);
  FN(cuCtxSetCurrent);
  FN(cuMemAlloc_v2);
  FN(cuMemFree_v2);
  FN(cuMemsetD32_v2);
  FN(cuMemcpyDtoH_v2);
  FN(cuCtxSynchronize);
  FN(cuMemHostAlloc);
  FN(cuMemFreeHost);
  FN(cuGetProcAddress_v2);
  Check(cuInit(0), "cuInit");
  // Entry points as cudart finds them, looked up while the process runs.
  void* pa_free = nullptr;
  void* pa_host_alloc = nullptr;
  void* pa_free_host = nullptr;
  Check(cuGetProcAddress_v2("cuMemFree", &pa_free, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), "cuGetProcAddress");
  Check(cuGetProcAddress_v2("cuMemHostAlloc", &pa_host_alloc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr),
        "cuGetProcAddress");
  Check(cuGetProcAddress_v2("cuMemFreeHost", &pa_free_host, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr),
        "cuGetProcAddress");
  CUdevice dev;
  CUcontext ctx;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUdeviceptr held = 0;
  Check(cuMemAlloc_v2(&held, bytes), "cuMemAlloc (held)");
  Check(cuMemsetD32_v2(held, pattern, bytes / 4), "cuMemsetD32");
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  printf("ready %d\n", static_cast<int>(getpid()));
  fflush(stdout);

  std::vector<CUdeviceptr> extra;
  char line[256];
  while (fgets(line, sizeof line, stdin) != nullptr) {
    std::string cmd(line, strcspn(line, "\r\n"));
    if (cmd == "call") {
      const double t0 = Now();
      CUdeviceptr p = 0;
      CUresult r = cuMemAlloc_v2(&p, 4096);
      if (r == CUDA_SUCCESS) cuMemFree_v2(p);
      printf("called %.6f %s\n", Now() - t0, Name(r));
    } else if (cmd == "sync") {
      const double t0 = Now();
      CUresult r = cuCtxSynchronize();
      printf("synced %.6f %s\n", Now() - t0, Name(r));
    } else if (cmd.rfind("alloc ", 0) == 0) {
      CUdeviceptr p = 0;
      CUresult r = cuMemAlloc_v2(&p, strtoull(cmd.c_str() + 6, nullptr, 0));
      if (r == CUDA_SUCCESS) extra.push_back(p);
      printf("alloc %s\n", Name(r));
    } else if (cmd == "free") {
      for (CUdeviceptr p : extra) cuMemFree_v2(p);
      extra.clear();
      printf("freed\n");
    } else if (cmd == "freeone" || cmd == "pa-freeone") {
      auto free_fn = cmd == "freeone" ? cuMemFree_v2 : reinterpret_cast<decltype(cuMemFree_v2)>(pa_free);
      const double t0 = Now();
      CUresult r = CUDA_ERROR_INVALID_VALUE;  // nothing allocated to free
      if (!extra.empty()) {
        r = free_fn(extra.back());
        extra.pop_back();
      }
      printf("freedone %.6f %s\n", Now() - t0, Name(r));
    } else if (cmd == "hostalloc" || cmd == "pa-hostalloc") {
      const bool pa = cmd == "pa-hostalloc";
      auto alloc_fn = pa ? reinterpret_cast<decltype(cuMemHostAlloc)>(pa_host_alloc) : cuMemHostAlloc;
      auto free_fn = pa ? reinterpret_cast<decltype(cuMemFreeHost)>(pa_free_host) : cuMemFreeHost;
      const double t0 = Now();
      void* p = nullptr;
      CUresult r = alloc_fn(&p, 4096, 0);
      if (r == CUDA_SUCCESS) r = free_fn(p);
      printf("hostalloc %.6f %s\n", Now() - t0, Name(r));
    } else if (cmd == "verify") {
      std::vector<unsigned> host(bytes / 4);
      CUresult r = cuMemcpyDtoH_v2(host.data(), held, bytes);
      bool ok = r == CUDA_SUCCESS;
      for (size_t i = 0; ok && i < host.size(); ++i) ok = host[i] == pattern;
      printf("verified %s\n", ok ? "ok" : "bad");
    } else if (cmd == "exit") {
      break;
    } else {
      printf("unknown %s\n", cmd.c_str());
    }
    fflush(stdout);
  }
  for (CUdeviceptr p : extra) cuMemFree_v2(p);
  cuMemFree_v2(held);
  return 0;
}
