// A GPU job for the compute tests: launches the sim's `busy` kernel back to back on one
// stream and reports, per 50 ms bucket of wall time, how many kernels completed.
//
//   compute_worker --seconds S --kernel-us K [--batch B] [--start-at EPOCH_MS]
//                  [--off-after MS]     stop launching after MS (then idle until the end)
//                  [--on-after MS]      start launching only after MS
//                  [--pulse-on MS --pulse-off MS]
//                                       from then on, launch for MS, idle for MS, in turn
//                  [--host-us H]        after each batch's launches, H us of host work (a
//                                       sleep) before the synchronisation
//                  [--poll 1]           wait for each batch by polling the stream
//                                       (cuStreamQuery), not synchronising
//                  [--shapes N]         launch N different kernels in turn (grids 1..N)
//
// Output (stdout, one line):
//   "kernels=<n> busy_ns=<gate-measured> mps_client_priority=<CUDA_MPS_CLIENT_PRIORITY or -> buckets=<c0>,..."
// Built twice: compute_worker_direct drives the launch gate itself (GSLICE_* policy from the
// environment, no shim), compute_worker launches plainly (for runs under the shim).
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gslice/clock.h"

#ifdef GSLICE_WORKER_DIRECT_GATE
#include "kernel_clock.h"
#include "launch_gate.h"
#endif

namespace {

#ifdef GSLICE_WORKER_DIRECT_GATE
void TraceLine(const char* line) { fprintf(stderr, "gslice[%d]: %s\n", static_cast<int>(getpid()), line); }
#endif

// UnixNs in milliseconds: the start time the test hands its workers and they wait for.
double NowMs() { return static_cast<double>(gslice::UnixNs()) / 1e6; }

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    fprintf(stderr, "compute_worker: %s failed: %s\n", what, name != nullptr ? name : "?");
    exit(2);
  }
}

#ifdef GSLICE_WORKER_DIRECT_GATE
void* ResolveReal(const char* name) { return dlsym(RTLD_DEFAULT, name); }
#endif

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2, start_at = 0, off_after = -1, on_after = 0, pulse_on = 0, pulse_off = 0, host_us = 0, poll = 0;
  uint64_t kernel_us = 1000;
  int batch = 4;
  unsigned shapes = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    double v = atof(argv[i + 1]);
    if (a == "--seconds") seconds = v;
    else if (a == "--kernel-us") kernel_us = static_cast<uint64_t>(v);
    else if (a == "--batch") batch = static_cast<int>(v);
    else if (a == "--start-at") start_at = v;
    else if (a == "--off-after") off_after = v;
    else if (a == "--on-after") on_after = v;
    else if (a == "--pulse-on") pulse_on = v;
    else if (a == "--pulse-off") pulse_off = v;
    else if (a == "--host-us") host_us = v;
    else if (a == "--poll") poll = v;
    else if (a == "--shapes") {
      if (!(v >= 1 && v <= 65536)) {
        fprintf(stderr, "compute_worker: --shapes takes 1 to 65536, not %s\n", argv[i + 1]);
        return 2;
      }
      shapes = static_cast<unsigned>(v);
    } else {
      fprintf(stderr, "compute_worker: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  Check(cuInit(0), "cuInit");
#ifdef GSLICE_WORKER_DIRECT_GATE
  // GSLICE_LOG=debug: the gate's decisions on stderr, as the shim writes them.
  const char* log = getenv("GSLICE_LOG");
  const bool trace = log != nullptr && strcmp(log, "debug") == 0;
  if (!gslice::compute::InitLaunchGate(ResolveReal, nullptr, trace ? TraceLine : nullptr)) {
    fprintf(stderr, "compute_worker: the launch gate did not start\n");
  }
#endif
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  static const char kImage[] = "gslice-sim-module 1\nkernel gslice_busy busy\n";
  CUmodule mod;
  Check(cuModuleLoadData(&mod, kImage), "cuModuleLoadData");
  CUfunction busy;
  Check(cuModuleGetFunction(&busy, mod, "gslice_busy"), "cuModuleGetFunction");
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  if (start_at == 0) start_at = NowMs();
  while (NowMs() < start_at) usleep(1000);
  const double end = start_at + seconds * 1e3;
  std::vector<int> buckets(static_cast<size_t>(seconds * 20) + 1, 0);
  uint64_t kernels = 0, launched = 0;
  void* params[] = {&kernel_us};
  for (double now = NowMs(); now < end; now = NowMs()) {
    const double t = now - start_at;
    if (t < on_after || (off_after >= 0 && t >= off_after)) {
      usleep(2000);
      continue;
    }
    if (pulse_on > 0 && pulse_off > 0 && fmod(t - on_after, pulse_on + pulse_off) >= pulse_on) {
      usleep(500);
      continue;
    }
    for (int k = 0; k < batch; ++k) {
      const unsigned grid = 1 + static_cast<unsigned>(launched++ % shapes);
#ifdef GSLICE_WORKER_DIRECT_GATE
      gslice::compute::LaunchTicket ticket;
      const gslice::compute::KernelShape shape{.function = busy, .grid = {grid, 1, 1}, .block = {1, 1, 1}};
      if (gslice::compute::LaunchThroughGate()) ticket = gslice::compute::BeforeLaunch(stream, false, &shape);
#endif
      Check(cuLaunchKernel(busy, grid, 1, 1, 1, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
#ifdef GSLICE_WORKER_DIRECT_GATE
      gslice::compute::AfterLaunch(ticket);
#endif
    }
    if (host_us > 0) usleep(static_cast<useconds_t>(host_us));
    if (poll > 0) {
      CUresult q;
      while ((q = cuStreamQuery(stream)) == CUDA_ERROR_NOT_READY) usleep(20);
      Check(q, "cuStreamQuery");
    } else {
#ifdef GSLICE_WORKER_DIRECT_GATE
      // The shim's synchronising hooks count the host's waits (launch_gate.h, CountWait).
      const int64_t waiting_from = gslice::MonotonicNs();
#endif
      Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
#ifdef GSLICE_WORKER_DIRECT_GATE
      if (gslice::compute::WaitsCounted()) gslice::compute::CountWait(gslice::MonotonicNs() - waiting_from);
#endif
    }
    const double done = NowMs();
    if (done < end) {
      kernels += static_cast<uint64_t>(batch);
      buckets[static_cast<size_t>((done - start_at) / 50.0)] += batch;
    }
  }
  uint64_t measured = 0;
#ifdef GSLICE_WORKER_DIRECT_GATE
  measured = gslice::compute::MeasuredBusyNs();
#endif
  // What MPS would be told about this client's priority (set for opportunistic work by the shim).
  const char* mps_priority = getenv("CUDA_MPS_CLIENT_PRIORITY");
  printf("kernels=%llu busy_ns=%llu mps_client_priority=%s buckets=", static_cast<unsigned long long>(kernels),
         static_cast<unsigned long long>(measured), mps_priority != nullptr ? mps_priority : "-");
  for (size_t i = 0; i < buckets.size(); ++i) printf(i == 0 ? "%d" : ",%d", buckets[i]);
  printf("\n");
  fflush(stdout);
  cuStreamDestroy(stream);
  return 0;
}
