// The GPU-time meter (interpose/compute/gpu_meter.h) on a scripted driver: one stream whose
// work the test completes by hand, each marker stamped with the GPU time at which its work
// ahead completed. What is measured, and how many driver calls each launch costs, with
// markers on every launch and with spaced ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <map>

#include "gpu_meter.h"

namespace gslice::compute {
namespace {

// One GPU stream: queued kernels run back to back from when the test starts them; a marker
// completes when the work queued before it has.
struct FakeGpu {
  struct Event {
    bool recorded = false;
    bool done = false;
    double ms = 0;  // completion time (GPU clock)
  };
  std::map<uintptr_t, Event> events;
  uintptr_t next = 1;
  std::deque<uintptr_t> queue;  // markers in stream order, not yet done
  int records = 0, queries = 0;

  // Completes all queued work at GPU time `ms` (the stream drains).
  void DrainAt(double ms) {
    for (uintptr_t e : queue) events[e] = Event{true, true, ms};
    queue.clear();
  }
};

FakeGpu* g_gpu = nullptr;

CUresult FakeCreate(CUevent* e, unsigned) {
  *e = reinterpret_cast<CUevent>(g_gpu->next++);
  g_gpu->events[reinterpret_cast<uintptr_t>(*e)] = {};
  return CUDA_SUCCESS;
}
CUresult FakeDestroy(CUevent) { return CUDA_SUCCESS; }
CUresult FakeRecord(CUevent e, CUstream) {
  ++g_gpu->records;
  const auto key = reinterpret_cast<uintptr_t>(e);
  g_gpu->events[key] = FakeGpu::Event{true, false, 0};
  g_gpu->queue.push_back(key);
  return CUDA_SUCCESS;
}
CUresult FakeQuery(CUevent e) {
  ++g_gpu->queries;
  return g_gpu->events[reinterpret_cast<uintptr_t>(e)].done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult FakeElapsed(float* ms, CUevent a, CUevent b) {
  const auto& ea = g_gpu->events[reinterpret_cast<uintptr_t>(a)];
  const auto& eb = g_gpu->events[reinterpret_cast<uintptr_t>(b)];
  if (!ea.done || !eb.done) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(eb.ms - ea.ms);
  return CUDA_SUCCESS;
}

class MeterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_gpu = &gpu_;
    api_.event_create = FakeCreate;
    api_.event_destroy = FakeDestroy;
    api_.event_record = FakeRecord;
    api_.event_query = FakeQuery;
    api_.event_elapsed = FakeElapsed;
    meter_.Reset(reinterpret_cast<CUstream>(0x10), 0, /*lazy_markers=*/true);
  }
  void TearDown() override { g_gpu = nullptr; }

  // One launch at host time now_ns (the kernel is queued; the test completes it later).
  int64_t Launch(int64_t now_ns, int64_t spacing_ns) {
    const int64_t busy = meter_.BeforeLaunch(api_, pool_, now_ns, spacing_ns);
    meter_.AfterLaunch(api_, pool_, /*eager=*/true, now_ns, spacing_ns);
    return busy;
  }

  FakeGpu gpu_;
  DriverApi api_;
  EventPool pool_;
  StreamMeter meter_;
};

TEST_F(MeterTest, EveryLaunchMarkedWithoutSpacing) {
  // A busy period of 10 launches 5 µs apart: a start marker, then an end marker per launch.
  for (int i = 0; i < 10; ++i) Launch(1'000'000 + i * 5'000, 0);
  EXPECT_EQ(gpu_.records, 11);
  EXPECT_EQ(meter_.outstanding(), 10u);
  gpu_.DrainAt(0.0);  // all of it done at once: no GPU time between the markers
  EXPECT_EQ(meter_.Poll(api_, pool_, 2'000'000), 0);
  EXPECT_EQ(meter_.outstanding(), 0u);
}

TEST_F(MeterTest, SpacedMarkersCutTheCallsAndStillMeasureTheBusyTime) {
  const int64_t spacing = 100'000;
  // The stream is found idle and a launch-bound job issues 100 launches 5 µs apart (500 µs
  // of host time): a start marker, the first launch's end marker, then one every 100 µs.
  int64_t t = 1'000'000;
  Launch(t, spacing);
  EXPECT_EQ(gpu_.records, 2);
  gpu_.DrainAt(1.0);  // both markers completed at GPU time 1.0 ms
  for (int i = 1; i < 100; ++i) Launch(t + i * 5'000, spacing);
  EXPECT_EQ(gpu_.records, 2 + 4);  // at +100, +200, +300, +400 µs
  // Far fewer queries than launches: drains are checked only when the newest marker is old.
  EXPECT_LE(gpu_.queries, 10);
  // The launches after the newest marker are counted as still queued (the queue bound errs
  // on the safe side) until a marker covers them.
  EXPECT_GT(meter_.outstanding(), 0u);
  gpu_.DrainAt(1.6);  // everything marked so far completed 0.6 ms after the first markers
  // The poller consumes what completed (0.6 ms busy) and marks the launches left uncovered.
  const int64_t busy = meter_.Poll(api_, pool_, t + 600'000);
  EXPECT_NEAR(static_cast<double>(busy), 600'000.0, 1'000.0);
  EXPECT_EQ(gpu_.records, 7);
  gpu_.DrainAt(1.7);
  EXPECT_NEAR(static_cast<double>(meter_.Poll(api_, pool_, t + 800'000)), 100'000.0, 1'000.0);
  EXPECT_EQ(meter_.outstanding(), 0u);
  // Drained and seen by the poller: the next launch starts a new busy period (start marker
  // and end marker), so the idle time in between is not counted.
  EXPECT_EQ(meter_.Poll(api_, pool_, t + 900'000), 0);
  const int before = gpu_.records;
  Launch(t + 5'000'000, spacing);
  EXPECT_EQ(gpu_.records, before + 2);
  gpu_.DrainAt(9.0);
  EXPECT_NEAR(static_cast<double>(meter_.Poll(api_, pool_, t + 6'000'000)), 0.0, 1'000.0);
}

TEST_F(MeterTest, SpacingNeedsLazyMarkers) {
  // A per-thread default stream gets no lazy markers (only its own thread can record on it):
  // spacing is ignored there, every launch is marked.
  meter_.Reset(CU_STREAM_PER_THREAD, 7, /*lazy_markers=*/false);
  for (int i = 0; i < 10; ++i) Launch(1'000'000 + i * 5'000, 100'000);
  EXPECT_EQ(gpu_.records, 11);
}

TEST_F(MeterTest, WorkQueuedUnmeteredIsOutstandingUntilItsMarkerCompletes) {
  // Launched unmetered: the meter has seen nothing, and the stream holds 5 ms of work.
  EXPECT_EQ(meter_.outstanding(), 0u);
  meter_.CoverQueued(api_, pool_, 1'000'000);
  EXPECT_EQ(gpu_.records, 1);
  EXPECT_EQ(meter_.outstanding(), 1u);
  EXPECT_EQ(meter_.Poll(api_, pool_, 2'000'000), 0);
  EXPECT_EQ(meter_.outstanding(), 1u) << "still queued until its marker completes";
  gpu_.DrainAt(5.0);
  // Its time is not measured: nothing marked where it began.
  EXPECT_EQ(meter_.Poll(api_, pool_, 6'000'000), 0);
  EXPECT_EQ(meter_.outstanding(), 0u);
  // The stream is idle again: the next launch starts a busy period of its own, and the idle
  // time since the covered work is not counted.
  Launch(20'000'000, 0);
  gpu_.DrainAt(21.0);
  EXPECT_EQ(meter_.Poll(api_, pool_, 22'000'000), 0);
}

TEST_F(MeterTest, WorkQueuedUnmeteredBehindMeteredWorkIsOutstandingWithIt) {
  Launch(1'000'000, 0);  // metered, still running
  meter_.CoverQueued(api_, pool_, 1'100'000);
  EXPECT_EQ(meter_.outstanding(), 2u);
  gpu_.DrainAt(3.0);  // the start marker, the launch's marker and the cover's, all at 3 ms
  EXPECT_EQ(meter_.Poll(api_, pool_, 4'000'000), 0);
  EXPECT_EQ(meter_.outstanding(), 0u);
}

}  // namespace
}  // namespace gslice::compute
