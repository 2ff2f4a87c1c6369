// The sim's libcupti.so: the subset of NVIDIA's CUPTI activity API that gslice's recorder
// (interpose/src/trace_cupti.cc) uses, over the simulated driver's kernel reports
// (sim/cuda/sim_activity.h). Kernels come back as CUpti_ActivityKernel10 records with the
// device start and end the sim ran them at, so tests on machines without a GPU check real
// timing data. Memcpy and memset activity is accepted and never reported (the sim's copies
// do not occupy the device).
//
// Timestamps are CLOCK_MONOTONIC nanoseconds, or what the timestamp callback returns.
#include <cupti_activity.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>
#include <string>

#include "gslice/clock.h"
#include "sim_activity.h"

#define GSLICE_CUPTI_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::mutex g_mu;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
CUpti_TimestampCallbackFunc g_timestamp = nullptr;
bool g_kernels = false;
uint8_t* g_buffer = nullptr;  // the buffer being filled (g_mu)
size_t g_buffer_size = 0;
size_t g_buffer_used = 0;
void (*g_subscribe)(GsliceSimKernelSink) = nullptr;

// Kernel names live as long as the library: records point at them.
std::mutex g_names_mu;
std::string* InternName(const char* name) {
  static constexpr int kMax = 4096;
  static std::string* names[kMax];
  static int count = 0;
  std::lock_guard<std::mutex> g(g_names_mu);
  for (int i = 0; i < count; ++i) {
    if (*names[i] == name) return names[i];
  }
  if (count == kMax) return names[kMax - 1];
  names[count] = new std::string(name);
  return names[count++];
}

// The timestamp callback's clock at a monotonic time: its offset, measured now.
uint64_t ToClientClock(uint64_t mono) {
  if (g_timestamp == nullptr) return mono;
  const int64_t offset = static_cast<int64_t>(g_timestamp()) - gslice::MonotonicNs();
  return static_cast<uint64_t>(static_cast<int64_t>(mono) + offset);
}

// Hands the current buffer to the client. REQUIRES: g_mu held; releases it for the callback.
void CompleteLocked(std::unique_lock<std::mutex>& l) {
  uint8_t* buffer = g_buffer;
  const size_t size = g_buffer_size, used = g_buffer_used;
  g_buffer = nullptr;
  g_buffer_size = g_buffer_used = 0;
  CUpti_BuffersCallbackCompleteFunc complete = g_complete;
  l.unlock();
  if (buffer != nullptr && complete != nullptr) complete(nullptr, 0, buffer, size, used);
  l.lock();
}

void OnKernel(const GsliceSimKernelActivity* a) {
  std::unique_lock<std::mutex> l(g_mu);
  if (!g_kernels) return;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (g_buffer == nullptr && g_request != nullptr) {
      uint8_t* b = nullptr;
      size_t size = 0, max_records = 0;
      g_request(&b, &size, &max_records);
      g_buffer = b;
      g_buffer_size = b == nullptr ? 0 : size;
      g_buffer_used = 0;
    }
    if (g_buffer == nullptr) return;  // the client gave no buffer: the record is dropped
    if (g_buffer_size - g_buffer_used >= sizeof(CUpti_ActivityKernel10)) break;
    CompleteLocked(l);
  }
  if (g_buffer == nullptr || g_buffer_size - g_buffer_used < sizeof(CUpti_ActivityKernel10)) return;
  CUpti_ActivityKernel10 r;
  memset(&r, 0, sizeof r);
  r.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  r.start = ToClientClock(a->start_ns);
  r.end = ToClientClock(a->end_ns);
  r.completed = r.end;
  r.deviceId = a->device;
  r.contextId = a->context_id;
  r.streamId = a->stream_id;
  r.correlationId = a->correlation_id;
  r.gridX = r.gridY = r.gridZ = r.blockX = r.blockY = r.blockZ = 1;
  r.name = InternName(a->name)->c_str();
  memcpy(g_buffer + g_buffer_used, &r, sizeof r);
  g_buffer_used += sizeof r;
}

// The sim driver this library sits beside (build/lib/sim/libcuda.so.1), already loaded by
// the shim or the program: its activity hook.
bool FindDriverHook() {
  if (g_subscribe != nullptr) return true;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&FindDriverHook), &info) == 0 || info.dli_fname == nullptr) return false;
  std::string dir = info.dli_fname;
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? std::string(".") : dir.substr(0, slash);
  void* h = dlopen((dir + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen((dir + "/libcuda.so.1").c_str(), RTLD_NOW);
  if (h == nullptr) return false;
  g_subscribe = reinterpret_cast<void (*)(GsliceSimKernelSink)>(dlsym(h, "gsliceSimSubscribeKernelActivity"));
  return g_subscribe != nullptr;
}

}  // namespace

GSLICE_CUPTI_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = g_timestamp != nullptr ? g_timestamp() : static_cast<uint64_t>(gslice::MonotonicNs());
  return CUPTI_SUCCESS;
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
  std::lock_guard<std::mutex> g(g_mu);
  g_timestamp = fn;
  return CUPTI_SUCCESS;
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                             CUpti_BuffersCallbackCompleteFunc complete) {
  if (request == nullptr || complete == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> g(g_mu);
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      if (!FindDriverHook()) return CUPTI_ERROR_NOT_INITIALIZED;
      {
        std::lock_guard<std::mutex> g(g_mu);
        g_kernels = true;
      }
      g_subscribe(OnKernel);
      return CUPTI_SUCCESS;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return CUPTI_SUCCESS;
    default:
      return CUPTI_ERROR_NOT_COMPATIBLE;
  }
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || kind == CUPTI_ACTIVITY_KIND_KERNEL) {
    if (g_subscribe != nullptr) g_subscribe(nullptr);
    std::lock_guard<std::mutex> g(g_mu);
    g_kernels = false;
  }
  return CUPTI_SUCCESS;
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t /*flag*/) {
  std::unique_lock<std::mutex> l(g_mu);
  if (g_buffer != nullptr) CompleteLocked(l);
  return CUPTI_SUCCESS;
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t offset = 0;
  if (*record != nullptr) {
    offset = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer) + sizeof(CUpti_ActivityKernel10);
  }
  if (offset + sizeof(CUpti_ActivityKernel10) > valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + offset);
  return CUPTI_SUCCESS;
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = 0;
  return CUPTI_SUCCESS;
}

GSLICE_CUPTI_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (str == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (gslice sim)";
  return CUPTI_SUCCESS;
}
