#include "gpu_meter.h"

namespace gslice::compute {

bool DriverApi::Bind(void* (*resolve)(const char*), const char** missing) {
  struct Entry {
    const char* name;
    const char* fallback;
    void** slot;
  };
  const Entry entries[] = {
      {"cuCtxGetCurrent", nullptr, reinterpret_cast<void**>(&ctx_get_current)},
      {"cuCtxSetCurrent", nullptr, reinterpret_cast<void**>(&ctx_set_current)},
      {"cuCtxGetDevice", nullptr, reinterpret_cast<void**>(&ctx_get_device)},
      {"cuDeviceGetUuid_v2", "cuDeviceGetUuid", reinterpret_cast<void**>(&device_get_uuid)},
      {"cuDeviceGetCount", nullptr, reinterpret_cast<void**>(&device_get_count)},
      {"cuDeviceGet", nullptr, reinterpret_cast<void**>(&device_get)},
      {"cuDeviceGetAttribute", nullptr, reinterpret_cast<void**>(&device_get_attribute)},
      {"cuDevicePrimaryCtxGetState", nullptr, reinterpret_cast<void**>(&primary_ctx_get_state)},
      {"cuEventCreate", nullptr, reinterpret_cast<void**>(&event_create)},
      {"cuEventDestroy_v2", "cuEventDestroy", reinterpret_cast<void**>(&event_destroy)},
      {"cuEventRecord", nullptr, reinterpret_cast<void**>(&event_record)},
      {"cuEventQuery", nullptr, reinterpret_cast<void**>(&event_query)},
      {"cuEventElapsedTime_v2", "cuEventElapsedTime", reinterpret_cast<void**>(&event_elapsed)},
  };
  for (const Entry& e : entries) {
    void* p = resolve(e.name);
    if (p == nullptr && e.fallback != nullptr) p = resolve(e.fallback);
    if (p == nullptr) {
      if (missing != nullptr) *missing = e.name;
      return false;
    }
    *e.slot = p;
  }
  return true;
}

CUevent EventPool::Get(const DriverApi& api) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (count_ > 0) return free_[--count_];
  }
  CUevent e = nullptr;
  if (api.event_create(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return nullptr;
  return e;
}

void EventPool::Put(CUevent e) {
  if (e == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ < static_cast<int>(sizeof free_ / sizeof free_[0])) {
    free_[count_++] = e;
    return;
  }
  // Pool full: the event is leaked rather than destroyed here, because destroying needs the
  // context current and this may be any thread. Bounded by the ring sizes, so unreachable.
}

void EventPool::Forget() {
  std::lock_guard<std::mutex> lock(mu_);
  count_ = 0;
}

void StreamMeter::Forget() {
  std::lock_guard<std::mutex> lock(mu_);
  head_ = tail_ = 0;
  last_done_ = nullptr;
  idle_ = true;
  newest_marker_ns_ = 0;
  const uint64_t n = launches_.load(std::memory_order_relaxed);
  done_launches_.store(n, std::memory_order_relaxed);
  marked_launches_ = n;
}

void StreamMeter::Reset(CUstream stream, uint64_t thread_key, bool lazy_markers) {
  std::lock_guard<std::mutex> lock(mu_);
  stream_ = stream;
  thread_key_ = thread_key;
  lazy_ = lazy_markers;
}

bool StreamMeter::RecordLocked(const DriverApi& api, EventPool& pool, bool start, int64_t now) {
  if (head_ - tail_ >= static_cast<uint32_t>(kMarkerRing)) return false;
  CUevent e = pool.Get(api);
  if (e == nullptr) return false;
  if (api.event_record(e, stream_) != CUDA_SUCCESS) {
    pool.Put(e);
    return false;
  }
  const uint64_t n = launches_.load(std::memory_order_relaxed);
  ring_[head_ % kMarkerRing] = Marker{e, n, start};
  ++head_;
  marked_launches_ = n;
  newest_marker_ns_ = now;
  return true;
}

int64_t StreamMeter::ConsumeLocked(const DriverApi& api, EventPool& pool) {
  int64_t busy = 0;
  while (tail_ != head_) {
    Marker& m = ring_[tail_ % kMarkerRing];
    CUresult r = api.event_query(m.event);
    if (r == CUDA_ERROR_NOT_READY) break;
    if (r == CUDA_SUCCESS && !m.start && last_done_ != nullptr) {
      float ms = 0;
      if (api.event_elapsed(&ms, last_done_, m.event) == CUDA_SUCCESS && ms > 0) {
        busy += static_cast<int64_t>(static_cast<double>(ms) * 1e6);
      }
    }
    pool.Put(last_done_);
    last_done_ = r == CUDA_SUCCESS ? m.event : nullptr;
    if (r != CUDA_SUCCESS) pool.Put(m.event);
    done_launches_.store(m.launches, std::memory_order_relaxed);
    ++tail_;
  }
  if (tail_ == head_ && done_launches_.load(std::memory_order_relaxed) == launches_.load(std::memory_order_relaxed)) {
    // Everything launched has completed: the busy period is over.
    pool.Put(last_done_);
    last_done_ = nullptr;
    idle_ = true;
  }
  return busy;
}

int64_t StreamMeter::BeforeLaunch(const DriverApi& api, EventPool& pool, int64_t now, int64_t spacing_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t busy = 0;
  // Once per marker: the first launch after the newest marker checks whether the stream
  // has drained, so an idle gap is never counted as busy.
  if (!idle_ && launches_.load(std::memory_order_relaxed) == marked_launches_ && !SpacedLocked(now, spacing_ns)) {
    busy = ConsumeLocked(api, pool);
  }
  if (idle_) {
    // If the start marker cannot be recorded (ring full, driver error), the period starts
    // at the first end marker instead: at most one interval is not counted.
    RecordLocked(api, pool, /*start=*/true, 0);
    idle_ = false;
  }
  // Counted before the launch is issued, so the poller never sees the stream drained while
  // this launch is on its way (a failed launch is covered by the next marker).
  launches_.fetch_add(1, std::memory_order_relaxed);
  return busy;
}

void StreamMeter::CoverQueued(const DriverApi& api, EventPool& pool, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  // Metered work still queued ahead of it: the busy period goes on through the covered work.
  // Otherwise the covered work starts one with no completed marker, so its own marker measures
  // nothing (not the idle time since the last metered work). Where the marker cannot be
  // recorded (ring full, driver error), the launch's own marker covers it.
  if (!idle_) ConsumeLocked(api, pool);
  launches_.fetch_add(1, std::memory_order_relaxed);
  RecordLocked(api, pool, /*start=*/false, now);
  idle_ = false;
}

void StreamMeter::AfterLaunch(const DriverApi& api, EventPool& pool, bool eager, int64_t now, int64_t spacing_ns) {
  if (!eager) return;
  std::lock_guard<std::mutex> lock(mu_);
  // A start marker leaves newest_marker_ns_ at 0, so a busy period's first launch is marked.
  if (SpacedLocked(now, spacing_ns)) return;
  RecordLocked(api, pool, /*start=*/false, now);
}

int64_t StreamMeter::Poll(const DriverApi& api, EventPool& pool, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_) {
    if (launches_.load(std::memory_order_relaxed) == marked_launches_) return 0;
    // Launches counted without a start marker (publish-only): the period starts at the
    // next marker; its first interval is not measured.
    idle_ = false;
  }
  int64_t busy = ConsumeLocked(api, pool);
  if (lazy_ && !idle_ && launches_.load(std::memory_order_relaxed) != marked_launches_ &&
      (tail_ == head_ || now - newest_marker_ns_ >= kLazyMarkerNs)) {
    RecordLocked(api, pool, /*start=*/false, now);
  }
  return busy;
}

}  // namespace gslice::compute
