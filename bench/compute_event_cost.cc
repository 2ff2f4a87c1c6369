// Host cost of the driver calls the launch gate's GPU-time meter makes (interpose/compute):
// cuEventRecord, cuEventQuery on a completed and on a pending event, cuEventElapsedTime,
// cuCtxGetCurrent. Median nanoseconds per call over REPS batches of N calls.
//
//   gslice_compute_event_bench events [N=20000] [REPS=7]
//   gslice_compute_event_bench launch [N=20000] [REPS=7]   empty-kernel launches (PTX, JIT),
//       N queued back to back then synchronised: median ns per launch (run it natively and
//       under the shim to see what the launch gate adds)
//   gslice_compute_event_bench launch-legacy [N] [REPS]    the same on the legacy default
//       stream (which a guaranteed process runs at the class's priority)
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gslice/clock.h"

namespace {

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "event bench: %s failed (%d)\n", what, static_cast<int>(r));
    exit(1);
  }
}

template <typename F>
double MedianNs(int n, int reps, F body) {
  std::vector<double> per;
  for (int r = 0; r < reps; ++r) {
    const int64_t t0 = gslice::MonotonicNs();
    for (int i = 0; i < n; ++i) body(i);
    per.push_back(static_cast<double>(gslice::MonotonicNs() - t0) / n);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

const char kEmptyPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry gslice_empty()\n{\n  ret;\n}\n";

int LaunchCost(int n, int reps, bool legacy) {
  CUmodule mod;
  Check(cuModuleLoadData(&mod, kEmptyPtx), "cuModuleLoadData");
  CUfunction f;
  Check(cuModuleGetFunction(&f, mod, "gslice_empty"), "cuModuleGetFunction");
  CUstream s = nullptr;
  if (!legacy) Check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (int i = 0; i < 1000; ++i) Check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel");
  Check(cuStreamSynchronize(s), "cuStreamSynchronize");
  std::vector<double> per;
  for (int r = 0; r < reps; ++r) {
    const int64_t t0 = gslice::MonotonicNs();
    for (int i = 0; i < n; ++i) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr);
    Check(cuStreamSynchronize(s), "cuStreamSynchronize");
    per.push_back(static_cast<double>(gslice::MonotonicNs() - t0) / n);
  }
  std::sort(per.begin(), per.end());
  printf("empty-kernel launch %.0f ns (median of %d batches of %d%s)\n", per[per.size() / 2], reps, n,
         legacy ? ", legacy default stream" : "");
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const bool legacy = argc > 1 && std::string(argv[1]) == "launch-legacy";
  const bool launch = legacy || (argc > 1 && std::string(argv[1]) == "launch");
  const int n = argc > 2 ? atoi(argv[2]) : 20000;
  const int reps = argc > 3 ? atoi(argv[3]) : 7;
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  if (launch) return LaunchCost(n, reps, legacy);
  CUstream s;
  Check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::vector<CUevent> ev(static_cast<size_t>(n));
  for (auto& e : ev) Check(cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");

  const double record = MedianNs(n, reps, [&](int i) { cuEventRecord(ev[static_cast<size_t>(i)], s); });
  Check(cuStreamSynchronize(s), "cuStreamSynchronize");
  const double query_done = MedianNs(n, reps, [&](int i) { cuEventQuery(ev[static_cast<size_t>(i)]); });
  float ms = 0;
  const double elapsed = MedianNs(n - 1, reps, [&](int i) {
    cuEventElapsedTime(&ms, ev[static_cast<size_t>(i)], ev[static_cast<size_t>(i) + 1]);
  });
  // A pending event: behind a large memset that keeps the stream busy for a while.
  CUdeviceptr buf;
  const size_t bytes = 1ull << 30;
  Check(cuMemAlloc(&buf, bytes), "cuMemAlloc");
  for (int k = 0; k < 64; ++k) Check(cuMemsetD8Async(buf, static_cast<unsigned char>(k), bytes, s), "cuMemsetD8Async");
  Check(cuEventRecord(ev[0], s), "cuEventRecord");
  const double query_pending = MedianNs(n, reps, [&](int) { cuEventQuery(ev[0]); });
  const bool was_pending = cuEventQuery(ev[0]) == CUDA_ERROR_NOT_READY;
  CUcontext cur;
  const double ctx_get = MedianNs(n, reps, [&](int) { cuCtxGetCurrent(&cur); });
  Check(cuStreamSynchronize(s), "cuStreamSynchronize");
  printf("cuEventRecord %.0f ns, cuEventQuery done %.0f ns, cuEventQuery pending %.0f ns%s, "
         "cuEventElapsedTime %.0f ns, cuCtxGetCurrent %.0f ns\n",
         record, query_done, query_pending, was_pending ? "" : " (finished during the loop)", elapsed, ctx_get);
  cuMemFree(buf);
  return 0;
}
