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
//   gslice_interpose_launch_bench [N=20000] [REPS=9] [host|batch] [own|legacy]
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "gslice/clock.h"
#include "test_support.h"

namespace {
bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  fprintf(stderr, "launch bench: %s failed (%d)\n", what, static_cast<int>(r));
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 20000;
  const int reps = argc > 2 ? atoi(argv[2]) : 9;
  const bool host_only = argc > 3 && strcmp(argv[3], "host") == 0;
  if (argc > 3 && !host_only && strcmp(argv[3], "batch") != 0) {
    fprintf(stderr, "launch bench: mode %s: expected host or batch\n", argv[3]);
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
  if (!Ok(cuInit(0), "cuInit") || !Ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !Ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") || !Ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent")) {
    return 1;
  }
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
