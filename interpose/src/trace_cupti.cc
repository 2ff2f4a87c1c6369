#include "trace_cupti.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>

#include "gslice/options.h"
#include "log.h"
#include "trace_recorder.h"

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define GSLICE_HAVE_CUPTI_HEADERS 1
#else
#define GSLICE_HAVE_CUPTI_HEADERS 0
#endif

namespace gslice::trace::cupti {

using shim::Log;
using shim::LogLevel;

#if GSLICE_HAVE_CUPTI_HEADERS
namespace {

struct Api {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*register_timestamp)(CUpti_TimestampCallbackFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*dropped)(CUcontext, uint32_t, size_t*);
  CUptiResult (*get_timestamp)(uint64_t*);
};

std::mutex g_mu;
bool g_loaded = false;
bool g_load_failed = false;
bool g_enabled = false;
Api g_api{};
char g_path[512];
char g_why[256];
std::atomic<int64_t> g_offset{0};  // recorder clock - CUPTI clock, where CUPTI keeps its own

constexpr size_t kBufferBytes = 1 << 20;

uint64_t CUPTIAPI Timestamp() { return static_cast<uint64_t>(NowNs()); }

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  void* p = nullptr;
  if (posix_memalign(&p, 8, kBufferBytes) != 0) p = nullptr;
  *buffer = static_cast<uint8_t*>(p);
  *size = p == nullptr ? 0 : kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  const int64_t offset = g_offset.load(std::memory_order_relaxed);
  CUpti_Activity* record = nullptr;
  while (buffer != nullptr && g_api.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        Gpu(GpuKind::kKernel, k->name != nullptr ? k->name : "kernel", k->streamId, k->deviceId, 0,
            static_cast<int64_t>(k->start) + offset, static_cast<int64_t>(k->end) + offset);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        const char* name = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "Memcpy HtoD"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "Memcpy DtoH"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "Memcpy DtoD"
                           : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_PTOP ? "Memcpy PtoP"
                                                                            : "Memcpy";
        Gpu(GpuKind::kMemcpy, name, m->streamId, m->deviceId, m->bytes, static_cast<int64_t>(m->start) + offset,
            static_cast<int64_t>(m->end) + offset);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        Gpu(GpuKind::kMemset, "Memset", m->streamId, m->deviceId, m->bytes, static_cast<int64_t>(m->start) + offset,
            static_cast<int64_t>(m->end) + offset);
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (g_api.dropped != nullptr && g_api.dropped(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    CountCuptiDropped(dropped);
  }
  free(buffer);
}

void* TryOpen(const char* path, int flags) {
  void* h = dlopen(path, flags);
  if (h != nullptr) snprintf(g_path, sizeof g_path, "%s", path);
  return h;
}

// CUPTI the program already loaded (PyTorch's profiler links it), GSLICE_CUPTI, one beside the
// real driver (the sim's), the library path, then the CUDA toolkit's usual folders; none with
// GSLICE_CUPTI=off.
void* OpenCupti(const char* real_driver_path) {
  const char* configured = OptionValue(Option::Cupti);
  if (strcmp(configured, "off") == 0) {
    // Host events only, even where the program loaded CUPTI itself (PyTorch does).
    snprintf(g_why, sizeof g_why, "GSLICE_CUPTI=off");
    return nullptr;
  }
  static const char* const kLoaded[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
  for (const char* name : kLoaded) {
    if (void* h = TryOpen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return h;
  }
  if (configured[0] != '\0') {
    if (void* h = TryOpen(configured, RTLD_NOW | RTLD_LOCAL)) return h;
    snprintf(g_why, sizeof g_why, "GSLICE_CUPTI=%.100s: %.120s", configured, dlerror());
    return nullptr;
  }
  if (real_driver_path != nullptr && real_driver_path[0] == '/') {
    char beside[512];
    snprintf(beside, sizeof beside, "%s", real_driver_path);
    if (char* slash = strrchr(beside, '/')) {
      snprintf(slash + 1, sizeof beside - static_cast<size_t>(slash + 1 - beside), "libcupti.so");
      if (void* h = TryOpen(beside, RTLD_NOW | RTLD_LOCAL)) return h;
    }
  }
  static const char* const kPaths[] = {
      "libcupti.so.13",
      "libcupti.so.12",
      "libcupti.so",
      "/usr/local/cuda/lib64/libcupti.so",
      "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
      "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so",
      "/usr/local/cuda/lib/libcupti.so",
      "/usr/local/cuda-13.0/lib/libcupti.so",
      "/usr/local/cuda-13.0/lib64/libcupti.so",
      "/usr/local/cuda-12/lib64/libcupti.so",
  };
  for (const char* p : kPaths) {
    if (void* h = TryOpen(p, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  snprintf(g_why, sizeof g_why, "libcupti.so not found (set GSLICE_CUPTI)");
  return nullptr;
}

bool LoadLocked(const char* real_driver_path) {
  if (g_loaded) return true;
  if (g_load_failed) return false;
  g_load_failed = true;
  void* h = OpenCupti(real_driver_path);
  if (h == nullptr) return false;
  g_api.register_callbacks = reinterpret_cast<decltype(g_api.register_callbacks)>(dlsym(h, "cuptiActivityRegisterCallbacks"));
  g_api.register_timestamp =
      reinterpret_cast<decltype(g_api.register_timestamp)>(dlsym(h, "cuptiActivityRegisterTimestampCallback"));
  g_api.enable = reinterpret_cast<decltype(g_api.enable)>(dlsym(h, "cuptiActivityEnable"));
  g_api.disable = reinterpret_cast<decltype(g_api.disable)>(dlsym(h, "cuptiActivityDisable"));
  g_api.flush_all = reinterpret_cast<decltype(g_api.flush_all)>(dlsym(h, "cuptiActivityFlushAll"));
  g_api.next_record = reinterpret_cast<decltype(g_api.next_record)>(dlsym(h, "cuptiActivityGetNextRecord"));
  g_api.dropped = reinterpret_cast<decltype(g_api.dropped)>(dlsym(h, "cuptiActivityGetNumDroppedRecords"));
  g_api.get_timestamp = reinterpret_cast<decltype(g_api.get_timestamp)>(dlsym(h, "cuptiGetTimestamp"));
  if (g_api.register_callbacks == nullptr || g_api.enable == nullptr || g_api.disable == nullptr ||
      g_api.flush_all == nullptr || g_api.next_record == nullptr) {
    snprintf(g_why, sizeof g_why, "%.200s lacks the activity API", g_path);
    return false;
  }
  if (g_api.register_callbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS) {
    snprintf(g_why, sizeof g_why, "%.150s refused the activity callbacks (another profiler holds them?)", g_path);
    return false;
  }
  // Records on the recorder's clock: CUPTI normalises GPU times to the callback's. Where it
  // cannot, the offset between the clocks is measured once.
  if (g_api.register_timestamp == nullptr || g_api.register_timestamp(Timestamp) != CUPTI_SUCCESS) {
    uint64_t t = 0;
    if (g_api.get_timestamp != nullptr && g_api.get_timestamp(&t) == CUPTI_SUCCESS) {
      g_offset.store(NowNs() - static_cast<int64_t>(t), std::memory_order_relaxed);
    }
  }
  g_loaded = true;
  g_load_failed = false;
  return true;
}

}  // namespace

void Start(const char* real_driver_path, char* note, size_t note_size) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!LoadLocked(real_driver_path)) {
    snprintf(note, note_size, "\"unavailable: %s\"", g_why);
    Log(LogLevel::kInfo, "trace: no GPU activity: %s", g_why);
    return;
  }
  if (!g_enabled) {
    const bool kernels = g_api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS;
    g_api.enable(CUPTI_ACTIVITY_KIND_MEMCPY);
    g_api.enable(CUPTI_ACTIVITY_KIND_MEMSET);
    g_enabled = true;
    if (!kernels) {
      snprintf(note, note_size, "\"unavailable: %s refused kernel activity\"", g_path);
      return;
    }
  }
  snprintf(note, note_size, "\"cupti %s\"", g_path);
}

void Flush() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_loaded && g_enabled) g_api.flush_all(1 /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */);
}

void Stop() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_loaded || !g_enabled) return;
  g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  g_api.disable(CUPTI_ACTIVITY_KIND_MEMCPY);
  g_api.disable(CUPTI_ACTIVITY_KIND_MEMSET);
  g_enabled = false;
}

#else  // no CUPTI headers at build time

void Start(const char*, char* note, size_t note_size) {
  snprintf(note, note_size, "\"unavailable: built without CUPTI headers\"");
}
void Flush() {}
void Stop() {}

#endif

}  // namespace gslice::trace::cupti
