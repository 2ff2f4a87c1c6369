// Green contexts as an SM actuator that can move (docs/compute.md, "What limits it"): MPS fixes
// a client's share of the SMs when its context is made, while a green context (a set of SMs cut
// from the device, cuGreenCtxCreate) is made at any time and a launch picks it by its stream. A
// shim that runs an opportunistic process's kernels on a green context's stream only while a
// guaranteed job loses to them rests on the facts this program measures, natively or as an MPS
// client (the suite, bench/gpu/suites/green_ctx.sh, runs it both ways):
//
//   gslice_compute_green_bench check [SM_PERCENT=50]
//     On GPU 0, in one process: the device's SMs and the group a split by count gives for
//     SM_PERCENT of them; a green context on that group and a stream of its own; whether a kernel
//     of a module loaded in the primary context (a CUfunction, as a program's own module) and of
//     a library (a CUkernel, as the CUDA runtime loads kernels) launch on the green stream and
//     write memory the primary context allocated (read back and compared); a grid that fills
//     every SM four blocks deep on the primary context's stream against the green stream (the
//     time ratio, against SMs over the group's); and what keeping a stream's order across the
//     two costs: next-to-empty launches on the primary stream, then each moved to the green
//     stream with an event each way, then runs of 64 moved with one event each way a run (host
//     ns and GPU ns a launch). Prints "name value" lines; "green ok" last where every check held, else
//     "green FAILED" and the checks that did not.
//   gslice_compute_green_bench load SECONDS primary|green [SM_PERCENT=50]
//     The wide grid back to back for SECONDS, on the primary context's stream or on a green
//     context's of SM_PERCENT of the SMs: "grids_per_s X" (a neighbour's speed beside it tells
//     whether the green context left it the other SMs).
//
// Every driver call's result is checked; a call the driver refuses is named with its code.
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "gslice/clock.h"
#include "test_support.h"

namespace {

std::vector<std::string> g_failed;

bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  fprintf(stderr, "green bench: %s failed (%d %s)\n", what, static_cast<int>(r), name ? name : "?");
  g_failed.push_back(what);
  return false;
}

// Blocks of 1024 threads: two fill an SM's 2048 thread slots, so a grid of 4 x SMs is two waves
// on every SM and four on half of them.
constexpr unsigned kWideThreads = 1024;
constexpr unsigned kWideDepth = 4;
constexpr uint64_t kWideBlockUs = 200;

struct Green {
  CUgreenCtx ctx = nullptr;
  CUcontext as_ctx = nullptr;
  CUstream stream = nullptr;
  unsigned sms = 0;
};

// A green context of at least `percent` of dev's SMs (the split's granularity may give more).
bool MakeGreen(CUdevice dev, unsigned percent, Green* g, unsigned* device_sms) {
  CUdevResource all;
  memset(&all, 0, sizeof(all));
  if (!Ok(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource")) return false;
  *device_sms = all.sm.smCount;
  printf("device_sms %u\nmin_partition_sms %u\ncoscheduled_alignment %u\n", all.sm.smCount, all.sm.minSmPartitionSize,
         all.sm.smCoscheduledAlignment);
  const unsigned want = all.sm.smCount * percent / 100;
  CUdevResource group, rest;
  memset(&group, 0, sizeof(group));
  memset(&rest, 0, sizeof(rest));
  unsigned groups = 1;
  if (!Ok(cuDevSmResourceSplitByCount(&group, &groups, &all, &rest, 0, want), "cuDevSmResourceSplitByCount")) return false;
  if (groups != 1) {
    fprintf(stderr, "green bench: the split for %u SMs made %u groups\n", want, groups);
    g_failed.push_back("split into one group");
    return false;
  }
  g->sms = group.sm.smCount;
  printf("group_sms %u\nremaining_sms %u\n", group.sm.smCount, rest.sm.smCount);
  CUdevResourceDesc desc;
  if (!Ok(cuDevResourceGenerateDesc(&desc, &group, 1), "cuDevResourceGenerateDesc")) return false;
  if (!Ok(cuGreenCtxCreate(&g->ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate")) return false;
  if (!Ok(cuCtxFromGreenCtx(&g->as_ctx, g->ctx), "cuCtxFromGreenCtx")) return false;
  return Ok(cuGreenCtxStreamCreate(&g->stream, g->ctx, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
}

CUresult LaunchWide(CUfunction busy, unsigned sms, CUstream s) {
  uint64_t us = kWideBlockUs;
  void* args[] = {&us};
  return cuLaunchKernel(busy, sms * kWideDepth, 1, 1, kWideThreads, 1, 1, 0, s, args, nullptr);
}

// Seconds a wide grid takes on s (median of 5, after one unmeasured).
double WideSeconds(CUfunction busy, unsigned sms, CUstream s, const char* what) {
  std::vector<double> t;
  for (int i = 0; i < 6; ++i) {
    const int64_t t0 = gslice::MonotonicNs();
    if (!Ok(LaunchWide(busy, sms, s), what) || !Ok(cuStreamSynchronize(s), what)) return 0;
    if (i > 0) t.push_back(static_cast<double>(gslice::MonotonicNs() - t0) / 1e9);
  }
  return gslice::test::Median(t);
}

// Writes a pattern through f on stream s into memory the primary context allocated, reads it
// back: whether the launch ran there and wrote it. With `current`, that context is made current
// around the launch (and the primary one again after).
bool FillsPrimaryMemory(CUfunction f, CUstream s, const char* what, CUcontext current = nullptr) {
  constexpr uint64_t kCount = 1 << 20;
  CUdeviceptr p = 0;
  if (!Ok(cuMemAlloc(&p, kCount * 4), "cuMemAlloc")) return false;
  bool ok = Ok(cuMemsetD32(p, 0, kCount), "cuMemsetD32");
  uint32_t pattern = 0x5a17c0de;
  uint64_t count = kCount;
  void* args[] = {&p, &pattern, &count};
  if (ok && current != nullptr) ok = Ok(cuCtxPushCurrent(current), "cuCtxPushCurrent (green)");
  if (ok) {
    ok = Ok(cuLaunchKernel(f, 256, 1, 1, 256, 1, 1, 0, s, args, nullptr), what);
    CUcontext popped = nullptr;
    if (current != nullptr) ok = Ok(cuCtxPopCurrent(&popped), "cuCtxPopCurrent") && ok;
    ok = ok && Ok(cuStreamSynchronize(s), what);
  }
  if (ok) {
    std::vector<uint32_t> host(kCount);
    ok = Ok(cuMemcpyDtoH(host.data(), p, kCount * 4), "cuMemcpyDtoH");
    uint64_t wrong = 0;
    for (uint32_t v : host) wrong += v != pattern;
    if (ok && wrong != 0) {
      fprintf(stderr, "green bench: %s left %llu of %llu words unwritten\n", what, static_cast<unsigned long long>(wrong),
              static_cast<unsigned long long>(kCount));
      g_failed.push_back(what);
      ok = false;
    }
  }
  cuMemFree(p);
  return ok;
}

// Host ns and GPU ns a launch of n next-to-empty kernels (gslice_busy for 0 us, one warp): on
// `home`; moved to the green stream one by one with an event each way; moved in runs of 64 with
// one event each way a run. Events home-side are the primary context's, green-side the green
// context's.
void OrderCost(CUfunction busy, CUstream home, const Green& g, int n) {
  CUevent to_away = nullptr, to_home = nullptr;
  if (!Ok(cuEventCreate(&to_away, CU_EVENT_DISABLE_TIMING), "cuEventCreate (primary)")) return;
  bool ok = Ok(cuCtxPushCurrent(g.as_ctx), "cuCtxPushCurrent (green)");
  ok = ok && Ok(cuEventCreate(&to_home, CU_EVENT_DISABLE_TIMING), "cuEventCreate (green)");
  CUcontext popped = nullptr;
  ok = Ok(cuCtxPopCurrent(&popped), "cuCtxPopCurrent") && ok;
  if (!ok) return;
  uint64_t no_time = 0;
  void* args[] = {&no_time};
  auto launch = [&](CUstream s) { return cuLaunchKernel(busy, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr); };
  // A move: after what home queued, launches on away, and home's next work after them.
  auto move = [&](int launches) {
    CUresult r = cuEventRecord(to_away, home);
    if (r == CUDA_SUCCESS) r = cuStreamWaitEvent(g.stream, to_away, 0);
    for (int i = 0; i < launches && r == CUDA_SUCCESS; ++i) r = launch(g.stream);
    if (r == CUDA_SUCCESS) r = cuEventRecord(to_home, g.stream);
    if (r == CUDA_SUCCESS) r = cuStreamWaitEvent(home, to_home, 0);
    return r;
  };
  struct Way {
    const char* name;
    int run;  // 0: on home
  };
  for (const Way& w : {Way{"home", 0}, Way{"moved_each", 1}, Way{"moved_runs64", 64}}) {
    std::vector<double> host, total;
    for (int rep = 0; rep < 5; ++rep) {
      const int64_t t0 = gslice::MonotonicNs();
      CUresult r = CUDA_SUCCESS;
      for (int i = 0; i < n && r == CUDA_SUCCESS; i += (w.run ? w.run : 1)) r = w.run ? move(w.run) : launch(home);
      const int64_t t1 = gslice::MonotonicNs();
      if (!Ok(r, w.name) || !Ok(cuStreamSynchronize(home), w.name)) return;
      host.push_back(static_cast<double>(t1 - t0) / n);
      total.push_back(static_cast<double>(gslice::MonotonicNs() - t0) / n);
    }
    printf("order_%s_host_ns %.0f\norder_%s_total_ns %.0f\n", w.name, gslice::test::Median(host), w.name,
           gslice::test::Median(total));
  }
  cuEventDestroy(to_away);
  cuEventDestroy(to_home);
}

int Check(unsigned percent) {
  CUdevice dev;
  CUcontext primary;
  if (!Ok(gslice::test::UsePrimaryContext(0, &dev, &primary), "the primary context")) return 1;
  CUmodule module;
  CUfunction busy, fill;
  if (!Ok(gslice::test::LoadTestKernels(&module, &busy, &fill), "LoadTestKernels")) return 1;
  CUstream home;
  if (!Ok(cuStreamCreate(&home, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return 1;
  Green g;
  unsigned sms = 0;
  if (!MakeGreen(dev, percent, &g, &sms)) {
    printf("green FAILED\n");
    return 1;
  }
  // A program's own module, loaded in the primary context.
  const bool function_runs = FillsPrimaryMemory(fill, g.stream, "a CUfunction on the green stream");
  // Refused with the primary context current, it may run with the green one current.
  const bool function_runs_current =
      function_runs || FillsPrimaryMemory(fill, g.stream, "a CUfunction on the green stream, green current", g.as_ctx);
  printf("cufunction_on_green %s\n", function_runs ? "ok" : function_runs_current ? "ok-green-current" : "refused");
  // A library's kernel, as the CUDA runtime loads kernels (context-independent).
  CUlibrary library = nullptr;
  CUkernel kernel = nullptr;
  bool kernel_runs = false;
  if (Ok(cuLibraryLoadData(&library, gslice::test::TestKernelsPtx(), nullptr, nullptr, 0, nullptr, nullptr, 0),
         "cuLibraryLoadData") &&
      Ok(cuLibraryGetKernel(&kernel, library, "gslice_fill"), "cuLibraryGetKernel")) {
    kernel_runs = FillsPrimaryMemory(reinterpret_cast<CUfunction>(kernel), g.stream, "a CUkernel on the green stream");
    // And on the primary context's stream, as a reference that the kernel itself is sound.
    FillsPrimaryMemory(reinterpret_cast<CUfunction>(kernel), home, "a CUkernel on the primary stream");
  }
  printf("cukernel_on_green %s\n", kernel_runs ? "ok" : "refused");
  // The SMs: a grid that fills every SM on both streams; the kernel that ran on the green stream.
  CUfunction wide = busy;
  if (!function_runs && kernel_runs && Ok(cuLibraryGetKernel(&kernel, library, "gslice_busy"), "cuLibraryGetKernel")) {
    wide = reinterpret_cast<CUfunction>(kernel);
  }
  if (function_runs || kernel_runs) {
    const double on_all = WideSeconds(wide, sms, home, "the wide grid on the primary stream");
    const double on_group = WideSeconds(wide, sms, g.stream, "the wide grid on the green stream");
    printf("wide_primary_ms %.2f\nwide_green_ms %.2f\nwide_ratio %.3f\nsm_ratio %.3f\n", on_all * 1e3, on_group * 1e3,
           on_all > 0 ? on_group / on_all : 0.0, g.sms ? static_cast<double>(sms) / g.sms : 0.0);
    // The green group's SMs hold the grid to SMs/group's times as long; all the SMs would not.
    if (on_all > 0 && on_group < on_all * 1.3) {
      fprintf(stderr, "green bench: the green stream ran the wide grid as fast as all the SMs\n");
      g_failed.push_back("the green context holds its kernels to its SMs");
    }
    OrderCost(wide, home, g, 8192);
  }
  if (!function_runs && !kernel_runs) g_failed.push_back("no kernel ran on the green stream");
  Ok(cuStreamDestroy(g.stream), "cuStreamDestroy (green)");
  Ok(cuGreenCtxDestroy(g.ctx), "cuGreenCtxDestroy");
  if (g_failed.empty() && function_runs && kernel_runs) {
    printf("green ok\n");
    return 0;
  }
  printf("green FAILED:");
  for (const std::string& f : g_failed) printf(" [%s]", f.c_str());
  printf("\n");
  return 1;
}

int Load(double seconds, bool green, unsigned percent) {
  CUdevice dev;
  CUcontext primary;
  if (!Ok(gslice::test::UsePrimaryContext(0, &dev, &primary), "the primary context")) return 1;
  CUlibrary library;
  CUkernel kernel;
  if (!Ok(cuLibraryLoadData(&library, gslice::test::TestKernelsPtx(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cuLibraryLoadData") ||
      !Ok(cuLibraryGetKernel(&kernel, library, "gslice_busy"), "cuLibraryGetKernel")) {
    return 1;
  }
  const CUfunction busy = reinterpret_cast<CUfunction>(kernel);
  CUstream s;
  if (!Ok(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return 1;
  Green g;
  CUdevResource all;
  memset(&all, 0, sizeof(all));
  if (!Ok(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource")) return 1;
  unsigned sms = all.sm.smCount;
  if (green) {
    if (!MakeGreen(dev, percent, &g, &sms)) return 1;
    s = g.stream;
  }
  // The grid is sized for the whole device either way: on the green context it takes longer.
  int grids = 0;
  const int64_t start = gslice::MonotonicNs();
  const int64_t end = start + static_cast<int64_t>(seconds * 1e9);
  while (gslice::MonotonicNs() < end) {
    if (!Ok(LaunchWide(busy, sms, s), "the wide grid") || !Ok(cuStreamSynchronize(s), "the wide grid")) return 1;
    ++grids;
  }
  printf("grids_per_s %.3f\n", grids / (static_cast<double>(gslice::MonotonicNs() - start) / 1e9));
  return 0;
}

}  // namespace

// SM_PERCENT, 1-99 (default 50), or 0 where it is not one.
unsigned PercentArg(int argc, char** argv, int i) {
  if (argc <= i) return 50;
  const int p = atoi(argv[i]);
  return p >= 1 && p <= 99 ? static_cast<unsigned>(p) : 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  const bool load = mode == "load" && argc > 3 && (std::string(argv[3]) == "primary" || std::string(argv[3]) == "green");
  const unsigned percent = PercentArg(argc, argv, load ? 4 : 2);
  if ((mode == "check" || load) && percent == 0) {
    fprintf(stderr, "green bench: SM_PERCENT is a whole number from 1 to 99, not %s\n", argv[load ? 4 : 2]);
    return 2;
  }
  // A driver before green contexts (CUDA 12.4) lacks their calls: say so, not a lookup error.
  for (const char* call : {"cuDeviceGetDevResource", "cuDevSmResourceSplitByCount", "cuGreenCtxCreate",
                           "cuGreenCtxStreamCreate", "cuLibraryLoadData"}) {
    if ((mode == "check" || load) && dlsym(RTLD_DEFAULT, call) == nullptr) {
      fprintf(stderr, "green bench: the CUDA driver has no %s (green contexts need CUDA 12.4 or later)\n", call);
      printf("green FAILED: [no green contexts in this driver]\n");
      return 1;
    }
  }
  if (mode == "check") return Check(percent);
  if (load) {
    const double seconds = atof(argv[2]);
    if (seconds <= 0) {
      fprintf(stderr, "green bench: load wants SECONDS > 0, not %s\n", argv[2]);
      return 2;
    }
    return Load(seconds, std::string(argv[3]) == "green", percent);
  }
  fprintf(stderr, "usage: gslice_compute_green_bench check [SM_PERCENT] | load SECONDS primary|green [SM_PERCENT]\n");
  return 2;
}
