// Measured GPU time of this process, per stream, from timed CUDA events ("markers").
//
// A stream's work is a sequence of busy periods. A start marker is recorded before the
// first launch of a busy period (the stream was found idle), end markers after launches.
// When a marker completes, the GPU time since the previous completed marker of the same
// busy period (cuEventElapsedTime) is busy time. A busy period ends when the newest marker
// completes with no launch after it. Markers are recorded by the launching thread (eager,
// used where queued-ahead work is bounded) or by the poller at most every kLazyMarkerNs
// (lazy: one event record per interval, not per launch). docs/compute.md gives the error
// bounds.
//
// Thread safety: every StreamMeter has its own mutex; the launching threads and the poller
// both take it. No driver call is made while holding two of them.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace gslice::compute {

// The real driver functions the meter and gate use (never the shim's hooks).
struct DriverApi {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*device_get_uuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned int) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_query)(CUevent) = nullptr;
  CUresult (*event_elapsed)(float*, CUevent, CUevent) = nullptr;

  // Fills every pointer through resolve(name); false (and names the missing one) if any
  // is absent.
  bool Bind(void* (*resolve)(const char* name), const char** missing);
};

inline constexpr int kMarkerRing = 512;
inline constexpr int64_t kLazyMarkerNs = 200'000;

// Events of one context, recycled (creating an event costs more than recording one).
class EventPool {
 public:
  CUevent Get(const DriverApi& api);  // nullptr on driver error
  void Put(CUevent e);
  // The context is going away and its events with it: drops them, unused.
  void Forget();

 private:
  std::mutex mu_;
  CUevent free_[kMarkerRing * 2] = {};
  int count_ = 0;
};

class StreamMeter {
 public:
  // key: the stream handle as launched (0 and CU_STREAM_PER_THREAD are their own keys;
  // per-thread default streams are told apart by owner thread, and only that thread can
  // record on them, so they get no lazy markers).
  void Reset(CUstream stream, uint64_t thread_key, bool lazy_markers);
  // The stream's context is going away, and its markers' events with it: drops them unused
  // and starts afresh (idle, every launch so far counted as done).
  void Forget();
  CUstream stream() const { return stream_; }
  uint64_t thread_key() const { return thread_key_; }

  // Launching thread, before the launch: finds out whether the stream is idle (then records
  // a start marker). Returns busy ns newly measured while checking. spacing_ns (streams with
  // lazy markers only): markers are at least that far apart (AfterLaunch), and the launch
  // checks for a drained stream only when the newest marker is older; the poller finds
  // drains in between.
  int64_t BeforeLaunch(const DriverApi& api, EventPool& pool, int64_t now, int64_t spacing_ns = 0);
  // Launching thread, before a launch: work was queued on the stream that no marker covers
  // (launched unmetered); it counts as one launch, outstanding until a marker recorded now
  // completes. Its time is not measured (nothing marks where it began).
  void CoverQueued(const DriverApi& api, EventPool& pool, int64_t now);
  // Launching thread, publish-only (no measurement needed, no driver call): counts the
  // launch; the poller's lazy markers tell when the stream has drained.
  void CountLaunch() { launches_.fetch_add(1, std::memory_order_relaxed); }
  // Launching thread, after the launch; eager: record an end marker now, unless the newest
  // end marker is younger than spacing_ns (as in BeforeLaunch; the poller marks a launch
  // left uncovered).
  void AfterLaunch(const DriverApi& api, EventPool& pool, bool eager, int64_t now, int64_t spacing_ns = 0);
  // Poller (or a thread waiting for the queue to shrink): consumes completed markers and,
  // when launches are not covered by a marker, records one (lazy). Returns busy ns.
  int64_t Poll(const DriverApi& api, EventPool& pool, int64_t now);

  uint64_t outstanding() const {
    return launches_.load(std::memory_order_relaxed) - done_launches_.load(std::memory_order_relaxed);
  }
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }

 private:
  struct Marker {
    CUevent event;
    uint64_t launches;  // launches issued on the stream when it was recorded
    bool start;
  };
  int64_t ConsumeLocked(const DriverApi& api, EventPool& pool);
  bool SpacedLocked(int64_t now, int64_t spacing_ns) const {
    return spacing_ns > 0 && lazy_ && now - newest_marker_ns_ < spacing_ns;
  }
  bool RecordLocked(const DriverApi& api, EventPool& pool, bool start, int64_t now);

  std::mutex mu_;
  CUstream stream_ = nullptr;
  uint64_t thread_key_ = 0;
  bool lazy_ = true;
  Marker ring_[kMarkerRing] = {};
  uint32_t head_ = 0, tail_ = 0;  // pending markers are [tail_, head_)
  CUevent last_done_ = nullptr;   // newest completed marker of the current busy period
  bool idle_ = true;
  int64_t newest_marker_ns_ = 0;
  std::atomic<uint64_t> launches_{0};
  std::atomic<uint64_t> done_launches_{0};
  uint64_t marked_launches_ = 0;  // launches covered by the newest marker
};

}  // namespace gslice::compute
