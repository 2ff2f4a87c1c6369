// gslice_default_stream_check: the default streams at the compute class's priority
// (launch_hooks.h), on the simulated driver (compute_sim_test) and on a GPU
// (bench/gpu/suites/compute.sh, case 7). Run plainly, under the shim.
//
//   gslice_default_stream_check order     work on the legacy default stream stays in order
//                                         with copies, memsets and event records on it, with
//                                         a blocking stream created afterwards and with the
//                                         per-thread default stream; prints "order ok"
//   gslice_default_stream_check latency [D_US K [legacy|per-thread]]
//                                         K kernels of D_US µs (filling the GPU) queued on four
//                                         streams at the device's least priority, then one
//                                         tiny kernel on the legacy (or this thread's
//                                         per-thread) default stream; prints
//                                         "latency_us=<tiny kernel done> flood_us=<flood done>"
//   gslice_default_stream_check probe     the same for a legacy-stream kernel launched
//                                         plainly, with CU_LAUNCH_ATTRIBUTE_PRIORITY, on a
//                                         greatest-priority stream, and after the legacy
//                                         stream's priority attribute is set (run natively)
//   gslice_default_stream_check flood S   such a flood, kept up for S seconds
//   gslice_default_stream_check follow READY GO
//                                         streams made before and after a class change
//                                         (Follow below); prints "first=P then=Q rounds=N"
//   gslice_default_stream_check tiny N    N tiny legacy-stream kernels 5 ms apart, after a
//                                         300 ms head start; prints "tiny_us median= p90= max="
//                                         (with `flood` in another process: the priority one
//                                         process's work gets over another's, as under MPS)
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gslice/clock.h"
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
  // A per-thread default stream orders with the legacy stream like a blocking stream.
  CK(gslice::test::LaunchBusy(busy, 5000, CU_STREAM_PER_THREAD));
  CK(gslice::test::LaunchFill(fill, dst, 0x20000000u, kCount, CU_STREAM_PER_THREAD));
  CK(cuMemcpyDtoHAsync(host.data(), dst, kCount * 4, nullptr));
  CK(cuStreamSynchronize(nullptr));
  Expect(host, 0, kCount, 0x20000000u, "legacy stream after a per-thread stream");
  CK(cuStreamDestroy(blocking));
  CK(cuEventDestroy(done));
  // Contexts made and destroyed in turn (a later one may get an earlier one's handle): each
  // one's legacy stream starts afresh.
  CUcontext primary = nullptr;
  CUdevice dev = 0;
  CK(cuCtxGetCurrent(&primary));
  CK(cuCtxGetDevice(&dev));
  for (int i = 0; i < 2; ++i) {
    CUcontext made = nullptr;
    CK(cuCtxCreate(&made, nullptr, 0, dev));
    CUmodule module = nullptr;
    CUfunction made_busy = nullptr, made_fill = nullptr;
    CK(gslice::test::LoadTestKernels(&module, &made_busy, &made_fill));
    CK(gslice::test::LaunchBusy(made_busy, 100, nullptr));
    CK(cuCtxSynchronize());
    CK(cuModuleUnload(module));
    CK(cuCtxDestroy(made));
    CK(cuCtxSetCurrent(primary));
  }
  CK(cuMemFree(dst));
  printf("order ok\n");
  return 0;
}

// The flood's streams are created through the real driver (GSLICE_REAL_DRIVER, else the
// normal entry point), so that the shim does not give them the class's priority.
using CreateFn = CUresult (*)(CUstream*, unsigned, int);
CreateFn RealStreamCreate() {
  const char* real = getenv("GSLICE_REAL_DRIVER");
  if (real == nullptr || real[0] == '\0') return &cuStreamCreateWithPriority;
  void* h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) Fail("dlopen GSLICE_REAL_DRIVER");
  auto create = reinterpret_cast<CreateFn>(dlsym(h, "cuStreamCreateWithPriority"));
  if (create == nullptr) Fail("dlsym cuStreamCreateWithPriority");
  return create;
}

// A flood of full-GPU kernels on four streams at the device's least priority (at equal
// priority a later kernel waits its turn behind each one's head).
struct Flood {
  CUstream streams[4] = {};
  CUevent done[4] = {};
  unsigned blocks = 0;  // more than the SMs hold at once
  int least = 0, greatest = 0;

  Flood() {
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CreateFn create = RealStreamCreate();
    for (CUstream& s : streams) CK(create(&s, CU_STREAM_NON_BLOCKING, least));
    for (CUevent& e : done) CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CUdevice dev = 0;
    CK(cuCtxGetDevice(&dev));
    int sms = 1;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    blocks = static_cast<unsigned>(sms) * 16;
  }
  ~Flood() {
    for (CUstream s : streams) CK(cuStreamDestroy(s));
    for (CUevent e : done) CK(cuEventDestroy(e));
  }
  void Launch(CUfunction busy, uint64_t us, int kernels) {
    for (int i = 0; i < kernels; ++i) LaunchBusyGrid(busy, us, blocks, streams[i % 4]);
    for (int i = 0; i < 4; ++i) CK(cuEventRecord(done[i], streams[i]));
  }
  bool Done() const {
    for (CUevent e : done) {
      CUresult r = cuEventQuery(e);
      if (r == CUDA_ERROR_NOT_READY) return false;
      if (r != CUDA_SUCCESS) Fail("cuEventQuery(flood)", r);
    }
    return true;
  }
};

// Launches one tiny kernel on `stream` (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a stream
// of the caller's); with_priority: as cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PRIORITY.
void LaunchTiny(CUfunction busy, CUstream stream, const int* with_priority) {
  if (with_priority == nullptr) return LaunchBusyGrid(busy, 1, 1, stream);
  uint64_t us = 1;
  void* args[] = {&us};
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  attr.value.priority = *with_priority;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  CK(cuLaunchKernelEx(&config, busy, args, nullptr));
}

// Waits for the flood and the tiny kernel (done after `tiny`): microseconds from start to each.
void Measure(const Flood& flood, CUevent tiny, int64_t start, double* tiny_us, double* flood_us) {
  int64_t tiny_ns = -1, flood_ns = -1;
  while (tiny_ns < 0 || flood_ns < 0) {
    if (tiny_ns < 0) {
      CUresult r = cuEventQuery(tiny);
      if (r == CUDA_SUCCESS) tiny_ns = gslice::MonotonicNs() - start;
      else if (r != CUDA_ERROR_NOT_READY) Fail("cuEventQuery(tiny)", r);
    }
    if (flood_ns < 0 && flood.Done()) flood_ns = gslice::MonotonicNs() - start;
  }
  *tiny_us = static_cast<double>(tiny_ns) / 1e3;
  *flood_us = static_cast<double>(flood_ns) / 1e3;
}

// The flood, then a tiny kernel on `stream`: prints when each was done.
int Latency(CUfunction busy, uint64_t flood_us, int flood_kernels, CUstream stream, const int* with_priority) {
  Flood flood;
  CUevent tiny_done = nullptr;
  CK(cuEventCreate(&tiny_done, CU_EVENT_DEFAULT));
  // Warm up (module load, first-launch costs).
  flood.Launch(busy, 1, 4);
  LaunchTiny(busy, stream, with_priority);
  CK(cuCtxSynchronize());
  const int64_t start = gslice::MonotonicNs();
  flood.Launch(busy, flood_us, flood_kernels);
  LaunchTiny(busy, stream, with_priority);
  CK(cuEventRecord(tiny_done, stream));
  double tiny_us = 0, done_us = 0;
  Measure(flood, tiny_done, start, &tiny_us, &done_us);
  CK(cuCtxSynchronize());
  CK(cuEventDestroy(tiny_done));
  printf("latency_us=%.0f flood_us=%.0f priorities=%d..%d\n", tiny_us, done_us, flood.least, flood.greatest);
  return 0;
}

// What the driver does with a legacy-stream kernel's priority: plainly, with the launch
// attribute, on a stream created at the greatest priority, and after the legacy stream's
// priority attribute is set (the shim's way). Run natively.
int Probe(CUfunction busy) {
  int least = 0, greatest = 0;
  CK(cuCtxGetStreamPriorityRange(&least, &greatest));
  CUstream high = nullptr;
  CK(cuStreamCreateWithPriority(&high, CU_STREAM_NON_BLOCKING, greatest));
  auto three = [&](const char* what, CUstream s, const int* with_priority) {
    for (int i = 0; i < 3; ++i) {
      printf("%-26s ", what);
      Latency(busy, 2000, 16, s, with_priority);
    }
  };
  three("legacy", CU_STREAM_LEGACY, nullptr);
  three("legacy, launch attribute", CU_STREAM_LEGACY, &greatest);
  three("greatest-priority stream", high, nullptr);
  CUstreamAttrValue v{};
  v.priority = greatest;
  const CUresult set = cuStreamSetAttribute(CU_STREAM_LEGACY, CU_STREAM_ATTRIBUTE_PRIORITY, &v);
  int now = 1;
  CK(cuStreamGetPriority(CU_STREAM_LEGACY, &now));
  printf("legacy stream priority attribute set to %d: error %d, priority now %d\n", greatest, static_cast<int>(set), now);
  if (set == CUDA_SUCCESS) three("legacy, stream attribute", CU_STREAM_LEGACY, nullptr);
  CK(cuStreamDestroy(high));
  return 0;
}

// flood S: keeps the flood going for S seconds (for another process's `tiny`).
int FloodFor(CUfunction busy, double seconds) {
  Flood flood;
  const int64_t end = gslice::MonotonicNs() + static_cast<int64_t>(seconds * 1e9);
  long kernels = 0;
  flood.Launch(busy, 2000, 16);
  while (gslice::MonotonicNs() < end) {
    // Two batches in flight: the next one queued before the last one drains.
    flood.Launch(busy, 2000, 16);
    kernels += 16;
    while (!flood.Done()) {
      timespec ts{0, 200'000};
      nanosleep(&ts, nullptr);
      if (gslice::MonotonicNs() >= end) break;
    }
  }
  CK(cuCtxSynchronize());
  printf("flood kernels=%ld\n", kernels);
  return 0;
}

// tiny N: N tiny kernels on the legacy stream, 5 ms apart, after a 300 ms head start for
// another process's flood; prints the median, p90 and largest time to completion.
int TinyLoop(CUfunction busy, int n) {
  CUevent done = nullptr;
  CK(cuEventCreate(&done, CU_EVENT_DEFAULT));
  LaunchTiny(busy, CU_STREAM_LEGACY, nullptr);
  CK(cuCtxSynchronize());
  timespec head{0, 300'000'000};
  nanosleep(&head, nullptr);
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const int64_t start = gslice::MonotonicNs();
    LaunchTiny(busy, CU_STREAM_LEGACY, nullptr);
    CK(cuEventRecord(done, CU_STREAM_LEGACY));
    CUresult r;
    while ((r = cuEventQuery(done)) == CUDA_ERROR_NOT_READY) {
    }
    if (r != CUDA_SUCCESS) Fail("cuEventQuery(tiny)", r);
    us.push_back(static_cast<double>(gslice::MonotonicNs() - start) / 1e3);
    timespec gap{0, 5'000'000};
    nanosleep(&gap, nullptr);
  }
  std::sort(us.begin(), us.end());
  printf("tiny_us median=%.0f p90=%.0f max=%.0f n=%d\n", us[us.size() / 2], us[us.size() * 9 / 10], us.back(), n);
  CK(cuEventDestroy(done));
  return 0;
}

// follow READY GO: a stream with a kernel, and one on the legacy stream, then READY is made;
// once GO exists (the test changed the slice's class meanwhile), every 10 ms a new stream
// with a kernel, and one on the legacy stream, until a new stream's priority differs from
// the first's (at most 1000 rounds); prints "first=P then=Q rounds=N".
int Follow(CUfunction busy, const char* ready, const char* go) {
  CUstream first = nullptr;
  CK(cuStreamCreate(&first, CU_STREAM_NON_BLOCKING));
  LaunchTiny(busy, first, nullptr);
  LaunchTiny(busy, CU_STREAM_LEGACY, nullptr);
  CK(cuCtxSynchronize());
  int first_priority = 0;
  CK(cuStreamGetPriority(first, &first_priority));
  FILE* f = fopen(ready, "w");
  if (f == nullptr) Fail("cannot make the ready file");
  fclose(f);
  const timespec tick{0, 10'000'000};
  for (int i = 0; access(go, F_OK) != 0; ++i) {
    if (i == 2000) Fail("no go file within 20 s");
    nanosleep(&tick, nullptr);
  }
  int then = first_priority, rounds = 0;
  for (; rounds < 1000 && then == first_priority; ++rounds) {
    nanosleep(&tick, nullptr);
    CUstream s = nullptr;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    LaunchTiny(busy, s, nullptr);
    LaunchTiny(busy, CU_STREAM_LEGACY, nullptr);
    CK(cuCtxSynchronize());
    CK(cuStreamGetPriority(s, &then));
    CK(cuStreamDestroy(s));
  }
  printf("first=%d then=%d rounds=%d\n", first_priority, then, rounds);
  CK(cuStreamDestroy(first));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gslice_default_stream_check order | latency [D_US K [legacy|per-thread]] | probe | flood S | tiny N | follow READY GO\n");
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
    // A reset primary context keeps its handle; its legacy stream starts afresh.
    CK(gslice::test::LaunchBusy(busy, 100, nullptr));
    CK(cuModuleUnload(module));
    CK(cuDevicePrimaryCtxReset(dev));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
    CK(gslice::test::LaunchBusy(busy, 100, nullptr));
    CK(cuCtxSynchronize());
  } else if (mode == "latency") {
    const uint64_t us = argc > 2 ? strtoull(argv[2], nullptr, 10) : 2000;
    const int k = argc > 3 ? atoi(argv[3]) : 20;
    const std::string on = argc > 4 ? argv[4] : "legacy";
    if (us == 0 || k <= 0 || (on != "legacy" && on != "per-thread")) Fail("bad latency arguments");
    rc = Latency(busy, us, k, on == "legacy" ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD, nullptr);
  } else if (mode == "probe") {
    rc = Probe(busy);
  } else if (mode == "flood" && argc > 2 && atof(argv[2]) > 0) {
    rc = FloodFor(busy, atof(argv[2]));
  } else if (mode == "tiny" && argc > 2 && atoi(argv[2]) > 0) {
    rc = TinyLoop(busy, atoi(argv[2]));
  } else if (mode == "follow" && argc > 3) {
    rc = Follow(busy, argv[2], argv[3]);
  } else {
    fprintf(stderr, "gslice_default_stream_check: unknown mode %s\n", mode.c_str());
  }
  CK(cuModuleUnload(module));
  CK(cuDevicePrimaryCtxRelease(dev));
  return rc;
}
