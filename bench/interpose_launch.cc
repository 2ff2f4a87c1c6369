// Kernel-launch cost through the driver as the program finds it (natively, or under the
// gslice shim with LD_PRELOAD): N empty launches (gslice_busy with 0 us, one thread) queued
// back to back, the whole batch timed on the host including the final synchronise.
// Prints the median nanoseconds per launch over REPS batches.
//
// "host" times only the launch calls, in bursts of 256 that each start on an empty stream
// (synchronised, untimed, between bursts): the host's cost per launch call, which the
// back-to-back batch hides once the launch queue is full and the GPU sets the pace.
// "legacy" launches on the context's legacy default stream (where PyTorch puts its work)
// instead of a stream of the bench's own.
//
// "pair" times, like "host", bursts of 256 launch calls, alternating between cuLaunchKernel as
// the program finds it (under the shim: the shim's hook) and the driver's own cuLaunchKernel
// (looked up in the libcuda.so.1 the program loaded, past any interposer), burst by burst in
// one process: what the hook adds per launch, without the run-to-run drift of two processes.
// Prints "hooked driver difference" (medians, ns per launch) last; with no shim both are the
// driver's, and the difference is the method's own noise.
//
// "parts" times, natively, what a launch path may spend besides the launch, each in bursts of
// 256 (medians over REPS, ns per call): cuEventRecord on the stream after a launch, the
// coarse and the precise monotonic clock, and cuCtxGetCurrent. Prints "name ns" lines.
//
//   gslice_interpose_launch_bench [N=20000] [REPS=9] [host|batch|pair|parts] [own|legacy]
#include <cuda.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "gslice/clock.h"
#include "test_support.h"

using gslice::test::Median;

namespace {
bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  fprintf(stderr, "launch bench: %s failed (%d)\n", what, static_cast<int>(r));
  return false;
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                              void**, void**);

// The driver's own cuLaunchKernel. Under the shim, the libcuda.so.1 the program links is the
// shim, which loads the driver privately by path: the driver is the other loaded libcuda.so*
// (found by name among the loaded objects, then looked up through its own handle). With no
// shim it is the one libcuda.so.1.
struct Found {
  const char* skip;
  char path[4096];
};

int FindOtherDriver(struct dl_phdr_info* info, size_t, void* arg) {
  auto* f = static_cast<Found*>(arg);
  const char* name = info->dlpi_name;
  if (name == nullptr || strstr(name, "libcuda.so") == nullptr) return 0;
  char real[4096];
  if (realpath(name, real) == nullptr || strcmp(real, f->skip) == 0) return 0;
  snprintf(f->path, sizeof f->path, "%s", real);
  return 1;
}

LaunchFn DriverLaunch(bool* through_shim) {
  Dl_info linked{};
  char linked_path[4096];
  if (dladdr(reinterpret_cast<void*>(&cuLaunchKernel), &linked) == 0 || linked.dli_fname == nullptr ||
      realpath(linked.dli_fname, linked_path) == nullptr) {
    return nullptr;
  }
  Found f{.skip = linked_path, .path = {}};
  *through_shim = dl_iterate_phdr(FindOtherDriver, &f) != 0;
  void* lib = dlopen(*through_shim ? f.path : linked_path, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  return reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
}


// One burst of empty launches on an empty stream through `launch`: ns per launch call.
bool TimeBurst(LaunchFn launch, CUfunction busy, CUstream stream, int burst, double* ns) {
  uint64_t microseconds = 0;
  void* args[] = {&microseconds};
  const int64_t t0 = gslice::MonotonicNs();
  for (int i = 0; i < burst; ++i) {
    if (!Ok(launch(busy, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel")) return false;
  }
  *ns = static_cast<double>(gslice::MonotonicNs() - t0) / burst;
  return Ok(cuStreamSynchronize(stream), "cuStreamSynchronize");
}
// ns per call of f over bursts of kBurst (f(i) for i in the burst), median of reps; after
// each burst, after(), untimed.
template <typename F, typename G>
double PerCall(int reps, int bursts, F f, G after) {
  constexpr int kBurst = 256;
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    int64_t spent = 0;
    for (int b = 0; b < bursts; ++b) {
      const int64_t t0 = gslice::MonotonicNs();
      for (int i = 0; i < kBurst; ++i) f(i);
      spent += gslice::MonotonicNs() - t0;
      after();
    }
    v.push_back(static_cast<double>(spent) / (bursts * kBurst));
  }
  return Median(v);
}

bool TimeParts(int n, int reps, CUfunction busy, CUstream stream) {
  const int bursts = n / 256 > 0 ? n / 256 : 1;
  std::vector<CUevent> events(256);
  for (CUevent& e : events) {
    if (!Ok(cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate")) return false;
  }
  bool ok = true;
  auto sync = [&] { ok = ok && Ok(cuStreamSynchronize(stream), "cuStreamSynchronize"); };
  // A record after each launch, as a sampled launch's end event: the pair's times less the launch's.
  const double launch = PerCall(reps, bursts, [&](int) { ok = ok && gslice::test::LaunchBusy(busy, 0, stream) == 0; }, sync);
  const double launch_and_record = PerCall(reps, bursts, [&](int i) {
    ok = ok && gslice::test::LaunchBusy(busy, 0, stream) == 0 && cuEventRecord(events[i], stream) == 0;
  }, sync);
  volatile int64_t sink = 0;
  const double coarse = PerCall(reps, bursts, [&](int) { sink = sink + gslice::MonotonicCoarseNs(); }, [] {});
  const double precise = PerCall(reps, bursts, [&](int) { sink = sink + gslice::MonotonicNs(); }, [] {});
  CUcontext ctx = nullptr;
  const double get_ctx = PerCall(reps, bursts, [&](int) { ok = ok && cuCtxGetCurrent(&ctx) == 0; }, [] {});
  for (CUevent e : events) cuEventDestroy(e);
  if (!ok) return false;
  printf("launch %.1f\nevent_record %.1f\nclock_coarse %.1f\nclock_precise %.1f\nctx_get_current %.1f\n", launch,
         launch_and_record - launch, coarse, precise, get_ctx);
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 20000;
  const int reps = argc > 2 ? atoi(argv[2]) : 9;
  const bool pair = argc > 3 && strcmp(argv[3], "pair") == 0;
  const bool parts = argc > 3 && strcmp(argv[3], "parts") == 0;
  const bool host_only = argc > 3 && strcmp(argv[3], "host") == 0;
  if (argc > 3 && !host_only && !pair && !parts && strcmp(argv[3], "batch") != 0) {
    fprintf(stderr, "launch bench: mode %s: expected host, batch, pair or parts\n", argv[3]);
    return 2;
  }
  const bool legacy = argc > 4 && strcmp(argv[4], "legacy") == 0;
  if (argc > 4 && !legacy && strcmp(argv[4], "own") != 0) {
    fprintf(stderr, "launch bench: stream %s: expected own or legacy\n", argv[4]);
    return 2;
  }
  constexpr int kBurst = 256;  // well inside the launch queue: no call waits for the GPU
  CUdevice dev;
  CUcontext ctx;
  if (!Ok(gslice::test::UsePrimaryContext(0, &dev, &ctx), "the primary context")) return 1;
  CUmodule module;
  CUfunction busy, fill;
  if (!Ok(gslice::test::LoadTestKernels(&module, &busy, &fill), "LoadTestKernels")) return 1;
  CUstream stream;
  if (legacy) {
    stream = CU_STREAM_LEGACY;
  } else if (!Ok(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    return 1;
  }
  for (int i = 0; i < 1000; ++i)
    if (!Ok(gslice::test::LaunchBusy(busy, 0, stream), "warm-up launch")) return 1;
  if (!Ok(cuStreamSynchronize(stream), "cuStreamSynchronize")) return 1;
  if (parts) return TimeParts(n, reps, busy, stream) ? 0 : 1;
  if (pair) {
    bool through_shim = false;
    const LaunchFn driver = DriverLaunch(&through_shim);
    if (driver == nullptr) {
      fprintf(stderr, "launch bench: no driver cuLaunchKernel found in this process (%s)\n", dlerror());
      return 1;
    }
    fprintf(stderr, "launch bench: pair: %s\n",
            through_shim ? "the program's cuLaunchKernel against the driver's, loaded behind it"
                         : "one libcuda.so.1: both sides are the driver (the method's noise)");
    // Bursts alternate, each rep's order flipped, so neither side always follows the other.
    std::vector<double> hooked, direct, diff;
    for (int r = 0; r < reps; ++r) {
      double h_sum = 0, d_sum = 0;
      int bursts = 0;
      for (int done = 0; done < n; done += kBurst, ++bursts) {
        double h = 0, d = 0;
        const bool hooked_first = (r + bursts) % 2 == 0;
        if (!TimeBurst(hooked_first ? cuLaunchKernel : driver, busy, stream, kBurst, hooked_first ? &h : &d) ||
            !TimeBurst(hooked_first ? driver : cuLaunchKernel, busy, stream, kBurst, hooked_first ? &d : &h)) {
          return 1;
        }
        h_sum += h;
        d_sum += d;
      }
      hooked.push_back(h_sum / bursts);
      direct.push_back(d_sum / bursts);
      diff.push_back((h_sum - d_sum) / bursts);
    }
    printf("%.1f %.1f %.1f\n", Median(hooked), Median(direct), Median(diff));
    return 0;
  }
  std::vector<double> per_launch;
  for (int r = 0; r < reps && host_only; ++r) {
    int64_t launching = 0;
    for (int done = 0; done < n; done += kBurst) {
      const int64_t t0 = gslice::MonotonicNs();
      for (int i = 0; i < kBurst; ++i) {
        if (gslice::test::LaunchBusy(busy, 0, stream) != CUDA_SUCCESS) return 1;
      }
      launching += gslice::MonotonicNs() - t0;
      if (!Ok(cuStreamSynchronize(stream), "cuStreamSynchronize")) return 1;
    }
    per_launch.push_back(static_cast<double>(launching) / ((n + kBurst - 1) / kBurst * kBurst));
  }
  for (int r = 0; r < reps && !host_only; ++r) {
    int64_t t0 = gslice::MonotonicNs();
    for (int i = 0; i < n; ++i) {
      if (gslice::test::LaunchBusy(busy, 0, stream) != CUDA_SUCCESS) return 1;
    }
    if (!Ok(cuStreamSynchronize(stream), "cuStreamSynchronize")) return 1;
    per_launch.push_back(static_cast<double>(gslice::MonotonicNs() - t0) / n);
  }
  std::sort(per_launch.begin(), per_launch.end());
  printf("%.1f\n", per_launch[per_launch.size() / 2]);
  return 0;
}
