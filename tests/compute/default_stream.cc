// gslice_default_stream_check: the default stream at the compute class's priority
// (launch_hooks.h), on the simulated driver (compute_sim_test) and on a GPU
// (bench/gpu/suites/compute_streams.sh). Run plainly, under the shim.
//
//   gslice_default_stream_check order     work on the legacy default stream stays in order
//                                         with copies, memsets and event records on it, and
//                                         with a blocking stream created afterwards; prints
//                                         "order ok"
//   gslice_default_stream_check latency [D_US K]
//                                         K kernels of D_US µs (filling the GPU) queued on four
//                                         streams at the device's least priority, then one
//                                         tiny kernel on the legacy default stream; prints
//                                         "latency_us=<tiny kernel done> flood_us=<flood done>"
//
// The flood's stream is created through the real driver (GSLICE_REAL_DRIVER, else the
// normal entry point), so that the shim does not give it the class's priority.
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <string>
#include <vector>

#include "test_support.h"

namespace {

[[noreturn]] void Fail(const char* what, long v = 0) {
  fprintf(stderr, "default_stream: FAILED: %s (%ld)\n", what, v);
  exit(1);
}

#define CK(call)                              \
  do {                                        \
    CUresult r_ = (call);                     \
    if (r_ != CUDA_SUCCESS) Fail(#call, r_);  \
  } while (0)

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// gslice_busy with `blocks` blocks of 32 threads: each block spins for `us`.
void LaunchBusyGrid(CUfunction busy, uint64_t us, unsigned blocks, CUstream s) {
  void* args[] = {&us};
  CK(cuLaunchKernel(busy, blocks, 1, 1, 32, 1, 1, 0, s, args, nullptr));
}

void Expect(const std::vector<uint32_t>& host, size_t from, size_t to, uint32_t want, const char* what) {
  for (size_t i = from; i < to; ++i) {
    if (host[i] != want) {
      fprintf(stderr, "default_stream: %s: element %zu is %#x, want %#x\n", what, i, host[i], want);
      exit(1);
    }
  }
}

int Order(CUfunction busy, CUfunction fill) {
  constexpr size_t kCount = 1 << 20;
  CUdeviceptr dst = 0;
  CK(cuMemAlloc(&dst, kCount * 4));
  std::vector<uint32_t> host(kCount);
  CUevent done = nullptr;
  CK(cuEventCreate(&done, CU_EVENT_DEFAULT));
  for (uint32_t round = 0; round < 20; ++round) {
    // A kernel, then a synchronous copy: the copy sees the kernel's writes.
    CK(gslice::test::LaunchBusy(busy, 500, nullptr));
    CK(gslice::test::LaunchFill(fill, dst, 0xA0000000u + round, kCount, nullptr));
    CK(cuMemcpyDtoH(host.data(), dst, kCount * 4));
    Expect(host, 0, kCount, 0xA0000000u + round, "kernel then synchronous copy");
    // A memset, a kernel over half, an asynchronous copy, a stream synchronisation.
    CK(cuMemsetD32Async(dst, 0xB0000000u + round, kCount, nullptr));
    CK(gslice::test::LaunchBusy(busy, 500, nullptr));
    CK(gslice::test::LaunchFill(fill, dst, 0xC0000000u + round, kCount / 2, nullptr));
    CK(cuMemcpyDtoHAsync(host.data(), dst, kCount * 4, nullptr));
    CK(cuStreamSynchronize(nullptr));
    Expect(host, 0, kCount / 2, 0xC0000000u + round, "memset, kernel, asynchronous copy");
    Expect(host, kCount / 2, kCount, 0xB0000000u + round, "memset, kernel, asynchronous copy");
    // An event recorded after a kernel completes after it.
    CK(gslice::test::LaunchBusy(busy, 2000, nullptr));
    CK(cuEventRecord(done, nullptr));
    CK(cuEventSynchronize(done));
    CK(cuStreamQuery(nullptr));  // nothing left on the default stream
  }
  // A blocking stream created after a long kernel on the legacy stream: its work comes after.
  CK(gslice::test::LaunchBusy(busy, 20000, nullptr));
  CK(gslice::test::LaunchFill(fill, dst, 0xE0000000u, kCount, nullptr));
  CUstream blocking = nullptr;
  CK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  CK(cuMemcpyDtoHAsync(host.data(), dst, kCount * 4, blocking));
  CK(cuStreamSynchronize(blocking));
  Expect(host, 0, kCount, 0xE0000000u, "a blocking stream created afterwards");
  // ... and the legacy stream keeps its order with it from then on.
  CK(gslice::test::LaunchBusy(busy, 5000, blocking));
  CK(gslice::test::LaunchFill(fill, dst, 0xF0000000u, kCount, blocking));
  CK(cuMemcpyDtoHAsync(host.data(), dst, kCount * 4, nullptr));
  CK(cuStreamSynchronize(nullptr));
  Expect(host, 0, kCount, 0xF0000000u, "legacy stream after a blocking stream");
  CK(gslice::test::LaunchFill(fill, dst, 0x10000000u, kCount, nullptr));
  CK(cuMemcpyDtoH(host.data(), dst, kCount * 4));
  Expect(host, 0, kCount, 0x10000000u, "a kernel on the legacy stream after a blocking stream");
  CK(cuStreamDestroy(blocking));
  CK(cuEventDestroy(done));
  CK(cuMemFree(dst));
  printf("order ok\n");
  return 0;
}

int Latency(CUfunction busy, uint64_t flood_us, int flood_kernels) {
  using CreateFn = CUresult (*)(CUstream*, unsigned, int);
  CreateFn create = &cuStreamCreateWithPriority;
  if (const char* real = getenv("GSLICE_REAL_DRIVER"); real != nullptr && real[0] != '\0') {
    void* h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) Fail("dlopen GSLICE_REAL_DRIVER");
    create = reinterpret_cast<CreateFn>(dlsym(h, "cuStreamCreateWithPriority"));
    if (create == nullptr) Fail("dlsym cuStreamCreateWithPriority");
  }
  int least = 0, greatest = 0;
  CK(cuCtxGetStreamPriorityRange(&least, &greatest));
  // Four streams: at equal priority the tiny kernel waits its turn behind each one's head.
  CUstream low[4] = {};
  for (CUstream& s : low) CK(create(&s, CU_STREAM_NON_BLOCKING, least));
  CUdevice dev = 0;
  CK(cuCtxGetDevice(&dev));
  int sms = 1;
  CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CUevent flood_done[4] = {}, tiny_done = nullptr;
  for (CUevent& e : flood_done) CK(cuEventCreate(&e, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&tiny_done, CU_EVENT_DEFAULT));
  // Warm up both streams (module load, first-launch costs).
  for (CUstream s : low) LaunchBusyGrid(busy, 1, 1, s);
  LaunchBusyGrid(busy, 1, 1, nullptr);
  CK(cuCtxSynchronize());
  const unsigned blocks = static_cast<unsigned>(sms) * 16;  // more blocks than the SMs hold at once
  const int64_t start = NowNs();
  for (int i = 0; i < flood_kernels; ++i) LaunchBusyGrid(busy, flood_us, blocks, low[i % 4]);
  for (int i = 0; i < 4; ++i) CK(cuEventRecord(flood_done[i], low[i]));
  LaunchBusyGrid(busy, 1, 1, nullptr);
  CK(cuEventRecord(tiny_done, nullptr));
  int64_t tiny_ns = -1, flood_ns = -1;
  while (tiny_ns < 0 || flood_ns < 0) {
    if (tiny_ns < 0) {
      CUresult r = cuEventQuery(tiny_done);
      if (r == CUDA_SUCCESS) tiny_ns = NowNs() - start;
      else if (r != CUDA_ERROR_NOT_READY) Fail("cuEventQuery(tiny)", r);
    }
    if (flood_ns < 0) {
      int done = 0;
      for (CUevent e : flood_done) {
        CUresult r = cuEventQuery(e);
        if (r == CUDA_SUCCESS) ++done;
        else if (r != CUDA_ERROR_NOT_READY) Fail("cuEventQuery(flood)", r);
      }
      if (done == 4) flood_ns = NowNs() - start;
    }
  }
  CK(cuCtxSynchronize());
  for (CUevent e : flood_done) CK(cuEventDestroy(e));
  CK(cuEventDestroy(tiny_done));
  printf("latency_us=%.0f flood_us=%.0f priorities=%d..%d\n", static_cast<double>(tiny_ns) / 1e3,
         static_cast<double>(flood_ns) / 1e3, least, greatest);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gslice_default_stream_check order | latency [D_US K]\n");
    return 2;
  }
  const std::string mode = argv[1];
  CK(cuInit(0));
  CUdevice dev = 0;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmodule module = nullptr;
  CUfunction busy = nullptr, fill = nullptr;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  int rc = 2;
  if (mode == "order") {
    rc = Order(busy, fill);
  } else if (mode == "latency") {
    const uint64_t us = argc > 2 ? strtoull(argv[2], nullptr, 10) : 2000;
    const int k = argc > 3 ? atoi(argv[3]) : 20;
    if (us == 0 || k <= 0) Fail("bad latency arguments");
    rc = Latency(busy, us, k);
  } else {
    fprintf(stderr, "gslice_default_stream_check: unknown mode %s\n", mode.c_str());
  }
  CK(cuModuleUnload(module));
  CK(cuDevicePrimaryCtxRelease(dev));
  return rc;
}
