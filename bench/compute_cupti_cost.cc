// What CUPTI's kernel activity records cost a launch-bound process, and how well they time its
// kernels: the facts the MPS controller's kernel clock rests on where it takes kernel times
// from CUPTI (interpose/compute/kernel_clock.h).
//
// In one process, natively (no shim), in this order:
//   host ns per launch call (bursts of 256 empty launches on an empty stream, median over
//   REPS): before CUPTI is loaded, with CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL on, after it is
//   switched off again, and on once more;
//   the GPU's pace (N empty launches back to back, timed to the synchronise): off and on;
//   the cost of switching collection on and off (cuptiActivityEnable / Disable), median and
//   the largest of TOGGLES;
//   how soon records arrive: the time cuptiActivityFlushAll takes after a synchronise, and
//   whether every kernel's record came;
//   how well records time kernels: gslice_busy(D) for D of 5, 50 and 500 us, back to back,
//   each kernel timed by its record and every 8th also by a pair of events around it; and
//   gslice_busy(50) launched behind a grid that fills every SM's block slots for 2 ms (does its
//   record count the wait for a slot, as the events do?); gslice's kernel sample (start event,
//   launch, cuEventQuery of the start, end event) with launches GAP us of host time apart:
//   what the samples it keeps read against the kernels' records;
//   detached (cuptiFinalize): the host's cost per launch after, and attached again.
// Prints "name value" lines, then "records ok" where every check held.
//
//   gslice_compute_cupti_bench [N=20000] [REPS=9] [TOGGLES=40] [LIBCUPTI=libcupti.so]
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "gslice/clock.h"
#include "test_support.h"

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>

using gslice::test::Median;

namespace {
bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  fprintf(stderr, "cupti bench: %s failed (%d)\n", what, static_cast<int>(r));
  return false;
}

struct Api {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
};
Api g_api{};

struct Record {
  uint64_t start, end;
  uint32_t grid, block;
};
std::mutex g_mu;
std::vector<Record> g_records;
std::atomic<int64_t> g_buffers{0};

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  void* p = nullptr;
  if (posix_memalign(&p, 8, 1 << 20) != 0) p = nullptr;
  *buffer = static_cast<uint8_t*>(p);
  *size = p == nullptr ? 0 : 1 << 20;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<Record> got;
  while (buffer != nullptr && g_api.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back({k->start, k->end, static_cast<uint32_t>(k->gridX), static_cast<uint32_t>(k->blockX)});
  }
  free(buffer);
  std::lock_guard<std::mutex> l(g_mu);
  g_records.insert(g_records.end(), got.begin(), got.end());
  g_buffers.fetch_add(1);
}


// Host ns per launch call: bursts of 256 on an empty stream, median over reps.
bool HostPerLaunch(CUfunction busy, CUstream stream, int n, int reps, double* ns) {
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    int64_t spent = 0;
    int launched = 0;
    for (; launched < n; launched += 256) {
      const int64_t t0 = gslice::MonotonicNs();
      for (int i = 0; i < 256; ++i) {
        if (!Ok(gslice::test::LaunchBusy(busy, 0, stream), "launch")) return false;
      }
      spent += gslice::MonotonicNs() - t0;
      if (!Ok(cuStreamSynchronize(stream), "sync")) return false;
    }
    v.push_back(static_cast<double>(spent) / launched);
  }
  *ns = Median(v);
  return true;
}

// The GPU's pace: n empty launches back to back, to the synchronise, ns per launch.
bool Pace(CUfunction busy, CUstream stream, int n, double* ns) {
  const int64_t t0 = gslice::MonotonicNs();
  for (int i = 0; i < n; ++i) {
    if (!Ok(gslice::test::LaunchBusy(busy, 0, stream), "launch")) return false;
  }
  if (!Ok(cuStreamSynchronize(stream), "sync")) return false;
  *ns = static_cast<double>(gslice::MonotonicNs() - t0) / n;
  return true;
}

size_t TakeRecords(std::vector<Record>* out) {
  std::lock_guard<std::mutex> l(g_mu);
  out->swap(g_records);
  g_records.clear();
  return out->size();
}
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 20000;
  const int reps = argc > 2 ? atoi(argv[2]) : 9;
  const int toggles = argc > 3 ? atoi(argv[3]) : 40;
  const char* lib = argc > 4 ? argv[4] : "libcupti.so";
  if (n < 256 || reps < 1 || toggles < 1) {
    fprintf(stderr, "cupti bench: expected N >= 256, REPS >= 1, TOGGLES >= 1\n");
    return 2;
  }
  CUdevice dev;
  CUcontext ctx;
  if (!Ok(gslice::test::UsePrimaryContext(0, &dev, &ctx), "the primary context")) return 1;
  CUmodule module;
  CUfunction busy, fill;
  CUstream stream;
  if (!Ok(gslice::test::LoadTestKernels(&module, &busy, &fill), "LoadTestKernels") ||
      !Ok(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    return 1;
  }
  double pace_off = 0;
  if (!Pace(busy, stream, n, &pace_off) || !Pace(busy, stream, n, &pace_off)) return 1;  // warm, then measured
  double before = 0;
  if (!HostPerLaunch(busy, stream, n, reps, &before)) return 1;

  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "cupti bench: %s: %s\n", lib, dlerror());
    return 1;
  }
  g_api.register_callbacks = reinterpret_cast<decltype(g_api.register_callbacks)>(dlsym(h, "cuptiActivityRegisterCallbacks"));
  g_api.enable = reinterpret_cast<decltype(g_api.enable)>(dlsym(h, "cuptiActivityEnable"));
  g_api.disable = reinterpret_cast<decltype(g_api.disable)>(dlsym(h, "cuptiActivityDisable"));
  g_api.flush_all = reinterpret_cast<decltype(g_api.flush_all)>(dlsym(h, "cuptiActivityFlushAll"));
  g_api.next_record = reinterpret_cast<decltype(g_api.next_record)>(dlsym(h, "cuptiActivityGetNextRecord"));
  if (g_api.register_callbacks == nullptr || g_api.enable == nullptr || g_api.disable == nullptr ||
      g_api.flush_all == nullptr || g_api.next_record == nullptr ||
      g_api.register_callbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS) {
    fprintf(stderr, "cupti bench: %s: no activity API\n", lib);
    return 1;
  }
  int64_t t0 = gslice::MonotonicNs();
  if (g_api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    fprintf(stderr, "cupti bench: kernel activity refused\n");
    return 1;
  }
  const int64_t first_enable = gslice::MonotonicNs() - t0;
  double on = 0, pace_on = 0;
  if (!HostPerLaunch(busy, stream, n, reps, &on) || !Pace(busy, stream, n, &pace_on)) return 1;
  // Records of the launches so far: every one came?
  t0 = gslice::MonotonicNs();
  g_api.flush_all(0);
  const int64_t flush_ns = gslice::MonotonicNs() - t0;
  g_api.flush_all(1);
  std::vector<Record> recs;
  const size_t got = TakeRecords(&recs);
  const size_t expected = static_cast<size_t>(reps) * ((n + 255) / 256 * 256) + static_cast<size_t>(n);
  t0 = gslice::MonotonicNs();
  g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  const int64_t first_disable = gslice::MonotonicNs() - t0;
  double off_after = 0, pace_after = 0;
  if (!HostPerLaunch(busy, stream, n, reps, &off_after) || !Pace(busy, stream, n, &pace_after)) return 1;
  g_api.flush_all(1);
  std::vector<Record> while_off;
  const size_t off_records = TakeRecords(&while_off);

  // Switching on and off around a burst of 256.
  std::vector<double> en, dis;
  for (int t = 0; t < toggles; ++t) {
    t0 = gslice::MonotonicNs();
    g_api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    en.push_back(static_cast<double>(gslice::MonotonicNs() - t0));
    for (int i = 0; i < 256; ++i) {
      if (!Ok(gslice::test::LaunchBusy(busy, 0, stream), "launch")) return 1;
    }
    t0 = gslice::MonotonicNs();
    g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    dis.push_back(static_cast<double>(gslice::MonotonicNs() - t0));
    if (!Ok(cuStreamSynchronize(stream), "sync")) return 1;
  }
  g_api.flush_all(1);
  std::vector<Record> toggled;
  const size_t toggled_records = TakeRecords(&toggled);

  g_api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  double on_again = 0;
  if (!HostPerLaunch(busy, stream, n, reps, &on_again)) return 1;
  g_api.flush_all(1);
  TakeRecords(&recs);

  // Accuracy: gslice_busy(D) back to back; every 8th between a pair of events.
  std::vector<CUevent> ev(2 * 32);
  for (CUevent& e : ev) {
    if (!Ok(cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate")) return 1;
  }
  bool ok = got == expected && off_records == 0;
  printf("host_ns_per_launch_before %.1f\nhost_ns_per_launch_on %.1f\nhost_ns_per_launch_off_after %.1f\n"
         "host_ns_per_launch_on_again %.1f\ngpu_pace_ns_off %.1f\ngpu_pace_ns_on %.1f\ngpu_pace_ns_off_after %.1f\n"
         "first_enable_us %.1f\nfirst_disable_us %.1f\nenable_us_median %.1f\nenable_us_max %.1f\n"
         "disable_us_median %.1f\ndisable_us_max %.1f\nflush_us %.1f\nrecords %zu of %zu\n"
         "records_while_off %zu\nrecords_toggled %zu of %d\n",
         before, on, off_after, on_again, pace_off, pace_on, pace_after, static_cast<double>(first_enable) / 1e3, static_cast<double>(first_disable) / 1e3,
         Median(en) / 1e3, *std::max_element(en.begin(), en.end()) / 1e3, Median(dis) / 1e3,
         *std::max_element(dis.begin(), dis.end()) / 1e3, static_cast<double>(flush_ns) / 1e3, got, expected, off_records, toggled_records,
         toggles * 256);
  for (uint64_t d : {5ull, 50ull, 500ull}) {
    std::vector<double> by_record, by_event;
    for (int i = 0; i < 256; ++i) {
      const bool timed = i % 8 == 0;
      if (timed && !Ok(cuEventRecord(ev[2 * (i / 8)], stream), "cuEventRecord")) return 1;
      if (!Ok(gslice::test::LaunchBusy(busy, d, stream), "launch")) return 1;
      if (timed && !Ok(cuEventRecord(ev[2 * (i / 8) + 1], stream), "cuEventRecord")) return 1;
    }
    if (!Ok(cuStreamSynchronize(stream), "sync")) return 1;
    for (int j = 0; j < 32; ++j) {
      float ms = 0;
      if (!Ok(cuEventElapsedTime(&ms, ev[2 * j], ev[2 * j + 1]), "cuEventElapsedTime")) return 1;
      by_event.push_back(ms * 1e3);
    }
    t0 = gslice::MonotonicNs();
    g_api.flush_all(1);
    const int64_t flush = gslice::MonotonicNs() - t0;
    TakeRecords(&recs);
    for (const Record& r : recs) by_record.push_back(static_cast<double>(r.end - r.start) / 1e3);
    const bool all = recs.size() == 256;
    ok = ok && all;
    printf("busy_%llu_us record_median_us %.2f event_median_us %.2f records %zu flush_forced_us %.1f\n",
           static_cast<unsigned long long>(d), Median(by_record), Median(by_event), recs.size(), static_cast<double>(flush) / 1e3);
  }
  // A short kernel behind a GPU full of blocks: a grid of gslice_busy(2000) filling every SM's
  // block slots on one stream, then gslice_busy(50) on another, between events. The events time
  // its wait for a slot; does its record?
  int sms = 0, per_sm = 0;
  CUstream other;
  if (!Ok(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute") ||
      !Ok(cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev), "cuDeviceGetAttribute") ||
      !Ok(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    return 1;
  }
  {
    std::vector<double> by_record, by_event;
    for (int j = 0; j < 16; ++j) {
      uint64_t fill_us = 2000;
      void* fill_args[] = {&fill_us};
      if (!Ok(cuLaunchKernel(busy, static_cast<unsigned>(sms * per_sm), 1, 1, 1, 1, 1, 0, other, fill_args, nullptr),
              "full-GPU launch")) {
        return 1;
      }
      usleep(100);  // its blocks are on the SMs
      if (!Ok(cuEventRecord(ev[2 * j], stream), "cuEventRecord") || !Ok(gslice::test::LaunchBusy(busy, 50, stream), "launch") ||
          !Ok(cuEventRecord(ev[2 * j + 1], stream), "cuEventRecord") || !Ok(cuCtxSynchronize(), "sync")) {
        return 1;
      }
      float ms = 0;
      if (!Ok(cuEventElapsedTime(&ms, ev[2 * j], ev[2 * j + 1]), "cuEventElapsedTime")) return 1;
      by_event.push_back(ms * 1e3);
    }
    g_api.flush_all(1);
    TakeRecords(&recs);
    for (const Record& r : recs) {
      if (r.grid == 1) by_record.push_back(static_cast<double>(r.end - r.start) / 1e3);
    }
    printf("busy_50_us_behind_a_full_gpu record_median_us %.2f event_median_us %.2f records %zu (%d SMs x %d blocks)\n",
           Median(by_record), Median(by_event), by_record.size(), sms, per_sm);
  }
  // The kernel clock's sample as gslice takes it (interpose/compute/launch_gate.cc): a start
  // event, the launch, cuEventQuery(start) once the launch returned (done: the stream had run
  // dry, and the sample is left out), an end event. gslice_busy(20) launched every GAP us of
  // host time: at 0 the GPU falls behind and every kernel queues behind the one before; as the
  // gap nears the kernel's time the stream empties between launches. What the samples kept
  // (start not done) read, against the kernels' records.
  for (int gap_us : {0, 10, 16, 20, 24, 30, 40}) {
    constexpr int kLaunches = 384;
    std::vector<CUevent> starts(kLaunches), ends(kLaunches);
    std::vector<bool> dry(kLaunches);
    for (int i = 0; i < kLaunches; ++i) {
      if (!Ok(cuEventCreate(&starts[i], CU_EVENT_DEFAULT), "cuEventCreate") ||
          !Ok(cuEventCreate(&ends[i], CU_EVENT_DEFAULT), "cuEventCreate")) {
        return 1;
      }
    }
    for (int i = 0; i < kLaunches; ++i) {
      const int64_t until = gslice::MonotonicNs() + gap_us * 1000;
      while (gslice::MonotonicNs() < until) {
      }
      if (!Ok(cuEventRecord(starts[i], stream), "cuEventRecord") || !Ok(gslice::test::LaunchBusy(busy, 20, stream), "launch")) {
        return 1;
      }
      dry[i] = cuEventQuery(starts[i]) == CUDA_SUCCESS;
      if (!Ok(cuEventRecord(ends[i], stream), "cuEventRecord")) return 1;
    }
    if (!Ok(cuStreamSynchronize(stream), "sync")) return 1;
    std::vector<double> kept, left;
    for (int i = 0; i < kLaunches; ++i) {
      float ms = 0;
      if (!Ok(cuEventElapsedTime(&ms, starts[i], ends[i]), "cuEventElapsedTime")) return 1;
      (dry[i] ? left : kept).push_back(ms * 1e3);
      cuEventDestroy(starts[i]);
      cuEventDestroy(ends[i]);
    }
    g_api.flush_all(1);
    TakeRecords(&recs);
    std::vector<double> by_record;
    for (const Record& r : recs) by_record.push_back(static_cast<double>(r.end - r.start) / 1e3);
    printf("busy_20_us_every_%d_us kept %zu pair_median_us %.2f left_out %zu pair_median_us %.2f record_median_us %.2f\n",
           gap_us, kept.size(), Median(kept), left.size(), Median(left), Median(by_record));
  }
  g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  g_api.flush_all(1);
  TakeRecords(&recs);
  // Detached (cuptiFinalize): does a launch cost what it did before CUPTI came? And attached
  // again: do records come?
  auto finalize = reinterpret_cast<CUptiResult (*)()>(dlsym(h, "cuptiFinalize"));
  if (finalize != nullptr) {
    if (!Ok(cuCtxSynchronize(), "sync")) return 1;
    t0 = gslice::MonotonicNs();
    const CUptiResult fr = finalize();
    const int64_t finalize_ns = gslice::MonotonicNs() - t0;
    double detached = 0;
    if (!HostPerLaunch(busy, stream, n, reps, &detached)) return 1;
    t0 = gslice::MonotonicNs();
    const bool again = g_api.register_callbacks(BufferRequested, BufferCompleted) == CUPTI_SUCCESS &&
                       g_api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS;
    const int64_t attach_ns = gslice::MonotonicNs() - t0;
    double reattached = 0;
    if (!HostPerLaunch(busy, stream, n / 4, 3, &reattached)) return 1;
    g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    g_api.flush_all(1);
    const size_t records_again = TakeRecords(&recs);
    if (!Ok(cuCtxSynchronize(), "sync")) return 1;
    t0 = gslice::MonotonicNs();
    finalize();
    const int64_t finalize2_ns = gslice::MonotonicNs() - t0;
    double detached2 = 0;
    if (!HostPerLaunch(busy, stream, n, reps, &detached2)) return 1;
    printf("finalize_result %d\nfinalize_us %.1f\nhost_ns_per_launch_detached %.1f\nattach_again_us %.1f (%s)\n"
           "host_ns_per_launch_attached_again %.1f\nrecords_attached_again %zu\nfinalize_again_us %.1f\n"
           "host_ns_per_launch_detached_again %.1f\n",
           static_cast<int>(fr), static_cast<double>(finalize_ns) / 1e3, detached, static_cast<double>(attach_ns) / 1e3,
           again ? "ok" : "refused", reattached, records_again, static_cast<double>(finalize2_ns) / 1e3, detached2);
  }
  printf("records %s\n", ok ? "ok" : "MISSING");
  return ok ? 0 : 1;
}

#else
int main() {
  fprintf(stderr, "cupti bench: built without CUPTI headers\n");
  return 1;
}
#endif
