// What the modes of gslice_remote_probe share (tests/remote/probe/main.cc lists the modes): the
// result names, the checks that end the program with a FAILED line, and a context on device 0.
#pragma once

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "test_support.h"

namespace gslice::probe {

inline const char* Name(CUresult r) {
  const char* n = nullptr;
  if (cuGetErrorName(r, &n) != CUDA_SUCCESS || n == nullptr) return "?";
  return n;
}

#define CK(call)                                                        \
  do {                                                                  \
    CUresult r_ = (call);                                               \
    if (r_ != CUDA_SUCCESS) {                                           \
      printf("FAILED %s: %s (line %d)\n", #call, Name(r_), __LINE__);   \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

inline void Expect(bool ok, const char* what) {
  if (!ok) {
    printf("FAILED %s\n", what);
    exit(1);
  }
}

// The driver's private table of these UUID bytes, as a runtime asks for it (answers.cc).
CUresult ExportTable(std::initializer_list<unsigned> bytes, const void*** out);

inline uint64_t Checksum(const std::vector<uint8_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : v) h = (h ^ b) * 1099511628211ull;
  return h;
}

inline CUcontext Setup(CUdevice* dev) {
  CK(cuInit(0));
  CK(cuDeviceGet(dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
  CK(cuCtxSetCurrent(ctx));
  return ctx;
}

inline void Verify(CUdeviceptr p, uint32_t pattern, size_t words, const char* what) {
  std::vector<uint32_t> host(words);
  CK(cuMemcpyDtoH(host.data(), p, words * 4));
  for (uint32_t v : host) Expect(v == pattern, what);
}

// For the copy modes: a context, the busy kernel, a stream of its own and bytes of device memory.
struct CopyWorld {
  CUfunction busy;
  CUstream stream;
  CUdeviceptr device;
};
inline CopyWorld CopySetup(size_t bytes) {
  CUdevice dev;
  Setup(&dev);
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  CopyWorld w{.busy = busy, .stream = nullptr, .device = 0};
  CK(cuStreamCreate(&w.stream, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&w.device, bytes));
  return w;
}

// The modes, one function each: argv[1] is the mode, argv[2] its argument where it takes one.
// Each prints what the driver answers and returns the program's exit status.
// Devices, contexts, memory, modules, launches: the driver API at large (check.cc).
int Check(int argc, char** argv);
// Memory and copies (memory.cc).
int Alloc(int argc, char** argv);
int Vmm(int argc, char** argv);
int BigCopy(int argc, char** argv);
int Fork(int argc, char** argv);
int Unforwarded(int argc, char** argv);
int HostMap(int argc, char** argv);
int HostShare(int argc, char** argv);
int LateCopy(int argc, char** argv);
int Staged(int argc, char** argv);
// Streams, graphs, callbacks and threads (streams.cc).
int Busy(int argc, char** argv);
int Deferred(int argc, char** argv);
int Graph(int argc, char** argv);
int CaptureCopy(int argc, char** argv);
int Callbacks(int argc, char** argv);
int Memops(int argc, char** argv);
int Threads(int argc, char** argv);
int Handoff(int argc, char** argv);
// Graphs built by hand and by capture into a graph (graphs.cc).
int GraphNodes(int argc, char** argv);
int GraphHostCopy(int argc, char** argv);
// Answers the client gives or keeps itself (answers.cc).
int Repeat(int argc, char** argv);
int Pointer(int argc, char** argv);
int Settings(int argc, char** argv);
int Kept(int argc, char** argv);
int KeptSets(int argc, char** argv);
int Tables(int argc, char** argv);
int LtTables(int argc, char** argv);
int LibraryTables(int argc, char** argv);
int UnifiedCopies(int argc, char** argv);
int Maps(int argc, char** argv);
// NVML (nvml.cc).
int Nvml(int argc, char** argv);
int NvmlCuda(int argc, char** argv);
int NvmlTable(int argc, char** argv);
int NvmlMissing(int argc, char** argv);

}  // namespace gslice::probe
