// The libcuda.so.1 shim: load-time setup and every hook listed in interpose/hooks.def.
//
// Every exported driver function is a generated trampoline through gslice_cuda_slots
// (interpose/gen_exports.py) that first passes the resume gate (resume_gate.h; the exceptions
// are in interpose/ungated.def); the constructor below fills the slots from the real driver
// and points the hooked ones here. A hook counts device memory against the slice (SliceAccount)
// and calls the real function through g_real. Hooks never throw and never abort: on any
// trouble they forward to the real driver unchanged.
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include <atomic>
#include <new>

#include "allocation_table.h"
#include "cuda_exports.h"
#include "kernel_clock.h"
#include "launch_gate.h"
#include "launch_hooks.h"
#include "gslice/options.h"
#include "gslice/shrink_guard.h"
#include "gslice/units.h"
#include "log.h"
#include "real_library.h"
#include "resume_gate.h"
#include "resume_hooks.h"
#include "slice_account.h"
#include "trace_recorder.h"

#define GSLICE_EXPORT extern "C" __attribute__((visibility("hidden")))

namespace gslice::shim {
namespace {

namespace ex = cuda_exports;

void* g_real[ex::kCount];  // the real driver's function for every exported name
RealLibrary g_real_library;

alignas(SliceAccount) unsigned char g_account_storage[sizeof(SliceAccount)];
SliceAccount* g_account = nullptr;  // set once by the constructor, never destroyed
AllocationTable g_allocs;
pthread_once_t g_attach_once = PTHREAD_ONCE_INIT;

// Per visible device: slice GPU index + 1 (0: not resolved yet), primary context and its
// retains through the shim (counted whatever the limits), graph memory charged.
std::atomic<int> g_gpu_of_device[kMaxDevices];
std::atomic<CUcontext> g_primary_ctx[kMaxDevices];
std::atomic<int> g_primary_refs[kMaxDevices];
std::atomic<int64_t> g_graph_charged[kMaxDevices];
std::atomic<bool> g_graph_memory_seen{false};
int64_t g_context_overhead = 0;

#define REAL(sym) (reinterpret_cast<decltype(&gslice_hook_##sym)>(g_real[ex::kSlot_##sym]))

void AttachOnce() {
  SliceAccount* a = g_account;
  if (a == nullptr) return;
  if (a->Init(/*attach=*/true)) {
    Log(LogLevel::kInfo, "slice %s: limits active (real driver %s)", a->slice_name(), g_real_library.path);
  }
}

// True when allocations are counted (a limit is configured and the ledger is mapped).
inline bool Active() {
  pthread_once(&g_attach_once, AttachOnce);
  return g_account != nullptr && g_account->active();
}

// Slice GPU index of a visible device ordinal, resolved once through its UUID.
int GpuOfDevice(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices) return -1;
  int cached = g_gpu_of_device[dev].load(std::memory_order_acquire);
  if (cached != 0) return cached - 1;
  CUuuid uuid;
  if (cuDeviceGetUuid(&uuid, dev) != CUDA_SUCCESS) return -1;
  int gpu = g_account->GpuForUuid(reinterpret_cast<const uint8_t*>(uuid.bytes), dev);
  g_gpu_of_device[dev].store(gpu + 1, std::memory_order_release);
  return gpu;
}

// The device of the calling thread's current context; -1 when there is none.
CUdevice CurrentDevice() {
  CUdevice dev = -1;
  if (cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
  return dev;
}

int CurrentGpu() {
  CUdevice dev = CurrentDevice();
  return dev < 0 ? -1 : GpuOfDevice(dev);
}

bool ChargeOrRefuse(int gpu, int64_t bytes, const char* what) {
  if (gpu < 0 || bytes <= 0) return true;
  if (g_account->Charge(gpu, bytes) == ChargeResult::kOk) return true;
  if (LogEnabled(LogLevel::kInfo)) {
    char want[32], used[32], limit[32];
    FormatSize(static_cast<uint64_t>(bytes), want, sizeof want);
    FormatSize(static_cast<uint64_t>(g_account->Usage(gpu)), used, sizeof used);
    FormatSize(static_cast<uint64_t>(g_account->Limit(gpu)), limit, sizeof limit);
    Log(LogLevel::kInfo, "%s of %s refused: slice %s uses %s of %s", what, want, g_account->slice_name(), used, limit);
  }
  return false;
}

// Whether bytes would fit now without charging them (graph memory, reserved at launch).
bool Fits(int gpu, int64_t bytes) {
  if (gpu < 0) return true;
  int64_t limit = g_account->Limit(gpu);
  return limit < 0 || g_account->Usage(gpu) + bytes <= limit;
}

void Record(uint64_t key, AllocKind kind, int gpu, int64_t bytes) {
  if (!g_allocs.Insert(key, kind, AllocRecord{bytes, gpu})) {
    // Host memory exhausted: the bytes stay charged until exit rather than going uncounted.
    Log(LogLevel::kWarn, "allocation table full; %lld bytes stay charged", static_cast<long long>(bytes));
  }
}

// Forgets key before the real free (the address may be reused at once by another thread).
bool Forget(uint64_t key, AllocKind kind, AllocRecord* rec) { return g_allocs.Erase(key, kind, rec); }

void ReleaseRecord(const AllocRecord& rec) { g_account->Release(rec.gpu, rec.bytes); }

// Brings the charge for graph memory on dev in line with what the driver has reserved.
void SyncGraphMemory(CUdevice dev) {
  if (!g_graph_memory_seen.load(std::memory_order_relaxed) || dev < 0 || dev >= kMaxDevices) return;
  cuuint64_t reserved = 0;
  if (cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) return;
  int gpu = GpuOfDevice(dev);
  if (gpu < 0) return;
  int64_t now = static_cast<int64_t>(reserved);
  int64_t before = g_graph_charged[dev].exchange(now);
  if (now > before) g_account->ForceCharge(gpu, now - before);
  else if (now < before) g_account->Release(gpu, before - now);
}

int64_t FormatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 4;  // packed and compressed formats: an upper bound per channel
  }
}

int64_t ArrayBytes(size_t w, size_t h, size_t d, unsigned channels, CUarray_format f) {
  return static_cast<int64_t>(w) * static_cast<int64_t>(h == 0 ? 1 : h) * static_cast<int64_t>(d == 0 ? 1 : d) *
         static_cast<int64_t>(channels == 0 ? 1 : channels) * FormatBytes(f);
}

// cuGetProcAddress hands out the shim's own trampolines, never a real driver address: each
// passes the resume gate (resume_gate.h) and, for hooked names, reaches the hook. The driver's
// answer is mapped back by address: g_proc_map holds every exported slot the real driver
// fills, sorted by its real address (hooked slots first among equal addresses). Built by the
// constructor, read-only afterwards.
struct ProcMapping {
  void* real;
  int slot;
};
ProcMapping g_proc_map[ex::kCount];
int g_proc_map_count = 0;

// Driver functions the shim does not export (found by cuGetProcAddress only) get one of the
// spare gated trampolines, once per address. Rare and never on a hot path: a mutex is fine.
pthread_mutex_t g_spare_mu = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> g_spares_used{0};
bool g_entries_sorted = true;  // gslice_cuda_entries ascend (set once by BuildProcMap)

bool IsHookSlot(int slot) { return gslice_cuda_slots[slot] != g_real[slot]; }

void BuildProcMap() {
  for (int i = 1; i < ex::kCount + ex::kSpareCount; ++i) {
    if (gslice_cuda_entries[i - 1] >= gslice_cuda_entries[i]) g_entries_sorted = false;
  }
  for (int i = 0; i < ex::kCount; ++i) {
    if (g_real[i] != reinterpret_cast<void*>(&gslice_cuda_unsupported)) g_proc_map[g_proc_map_count++] = {g_real[i], i};
  }
  // Insertion sort by address (hooked first among equals): ~700 entries, once at load.
  for (int i = 1; i < g_proc_map_count; ++i) {
    ProcMapping m = g_proc_map[i];
    int j = i - 1;
    auto before = [&](const ProcMapping& a, const ProcMapping& b) {
      return a.real != b.real ? a.real < b.real : (IsHookSlot(a.slot) && !IsHookSlot(b.slot));
    };
    while (j >= 0 && before(m, g_proc_map[j])) {
      g_proc_map[j + 1] = g_proc_map[j];
      --j;
    }
    g_proc_map[j + 1] = m;
  }
}

int SlotOfReal(void* p) {
  int lo = 0, hi = g_proc_map_count;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (g_proc_map[mid].real < p) lo = mid + 1;
    else hi = mid;
  }
  return lo < g_proc_map_count && g_proc_map[lo].real == p ? g_proc_map[lo].slot : -1;
}

// The hook for an internal alias of a hooked function: the same base name (newest version;
// _ptsz when per-thread). -1 when symbol names no hooked function.
int HookSlotByName(const char* symbol, cuuint64_t flags) {
  const bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  size_t len = strlen(symbol);
  int best = -1;
  for (int slot = 0; slot < ex::kCount; ++slot) {
    if (!IsHookSlot(slot)) continue;
    const char* name = ex::kNames[slot];
    if (strncmp(name, symbol, len) != 0) continue;
    const char* suffix = name + len;
    bool is_ptsz = strstr(suffix, "_ptsz") != nullptr || strstr(suffix, "_ptds") != nullptr;
    bool versioned = suffix[0] == '_' && suffix[1] == 'v';
    if (suffix[0] != '\0' && !is_ptsz && !versioned) continue;
    if (is_ptsz != ptds) continue;
    best = slot;  // names are sorted: later entries are newer versions
  }
  return best;
}

void* SpareTrampoline(void* p) {
  pthread_mutex_lock(&g_spare_mu);
  const int used = g_spares_used.load(std::memory_order_relaxed);
  void* out = nullptr;
  for (int j = 0; j < used && out == nullptr; ++j) {
    if (gslice_cuda_slots[ex::kCount + j] == p) out = gslice_cuda_entries[ex::kCount + j];
  }
  if (out == nullptr && used < ex::kSpareCount) {
    __atomic_store_n(&gslice_cuda_slots[ex::kCount + used], p, __ATOMIC_RELEASE);
    g_spares_used.store(used + 1, std::memory_order_relaxed);
    out = gslice_cuda_entries[ex::kCount + used];
  }
  pthread_mutex_unlock(&g_spare_mu);
  return out;
}

// Whether p is one of the shim's own trampolines (a driver that resolves its own exported
// names through the dynamic linker hands those out). The entries are emitted in order into
// one section, so the table is sorted by address (g_entries_sorted: BuildProcMap checked).
bool IsOwnEntry(void* p) {
  if (!g_entries_sorted) {
    for (int i = 0; i < ex::kCount + ex::kSpareCount; ++i) {
      if (gslice_cuda_entries[i] == p) return true;
    }
    return false;
  }
  int lo = 0, hi = ex::kCount + ex::kSpareCount;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (gslice_cuda_entries[mid] < p) lo = mid + 1;
    else hi = mid;
  }
  return lo < ex::kCount + ex::kSpareCount && gslice_cuda_entries[lo] == p;
}

void* MapProc(const char* symbol, void* p, cuuint64_t flags) {
  if (p == nullptr || IsOwnEntry(p)) return p;
  int slot = SlotOfReal(p);
  if (slot < 0 && symbol != nullptr) {
    slot = HookSlotByName(symbol, flags);
    if (slot >= 0) Log(LogLevel::kDebug, "cuGetProcAddress(%s): unknown real address, using the hook by name", symbol);
  }
  if (slot >= 0) return gslice_cuda_entries[slot];
  // An address the export table does not know: a spare gated trampoline forwards it.
  void* spare = SpareTrampoline(p);
  if (spare != nullptr) {
    Log(LogLevel::kDebug, "cuGetProcAddress(%s): unknown real address, forwarded through a spare trampoline",
        symbol != nullptr ? symbol : "?");
    return spare;
  }
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    Log(LogLevel::kWarn, "cuGetProcAddress(%s): no spare trampoline left; this function bypasses the resume gate",
        symbol != nullptr ? symbol : "?");
  }
  return p;
}

}  // namespace
}  // namespace gslice::shim

using namespace gslice;
using namespace gslice::shim;

// ---------------------------------------------------------------------------------------
// Hooks. Each has the real function's signature.

GSLICE_EXPORT CUresult gslice_hook_cuInit(unsigned int flags) {
  if (g_real_library.handle == nullptr) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      Log(LogLevel::kError, "cuInit: no real libcuda.so.1 found (set GSLICE_REAL_DRIVER to its absolute path)");
    }
    return CUDA_ERROR_NO_DEVICE;
  }
  CUresult r = REAL(cuInit)(flags);
  if (r == CUDA_SUCCESS) (void)Active();
  if (r == CUDA_SUCCESS) StartLaunchGate(g_real, g_real_library.handle);  // compute slices
  if (r == CUDA_SUCCESS) StartResumeHooks(g_real);  // suspend/resume (resume_hooks.h)
  if (r == CUDA_SUCCESS) trace::Init(g_real, g_real_library.path, g_account);  // timelines (trace_recorder.h)
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  CUresult r = REAL(cuGetProcAddress)(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = MapProc(symbol, *pfn, flags);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                                       CUdriverProcAddressQueryResult* status) {
  CUresult r = REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = MapProc(symbol, *pfn, flags);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  CUresult r = REAL(cuMemGetInfo_v2)(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || !Active()) return r;
  int gpu = CurrentGpu();
  int64_t limit = g_account->Limit(gpu);
  if (limit < 0) return r;
  int64_t used = g_account->Usage(gpu);
  int64_t left = limit > used ? limit - used : 0;
  if (free_bytes != nullptr && static_cast<int64_t>(*free_bytes) > left) *free_bytes = static_cast<size_t>(left);
  if (total_bytes != nullptr) *total_bytes = static_cast<size_t>(limit);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  CUresult r = REAL(cuDeviceTotalMem_v2)(bytes, dev);
  if (r != CUDA_SUCCESS || !Active() || bytes == nullptr) return r;
  int64_t limit = g_account->Limit(GpuOfDevice(dev));
  if (limit >= 0 && static_cast<uint64_t>(limit) < *bytes) *bytes = static_cast<size_t>(limit);
  return r;
}

// --- contexts ---------------------------------------------------------------------------
//
// A context costs device memory (GSLICE_CONTEXT_OVERHEAD each). It is charged with the limit
// check BEFORE the driver creates it, so a context that does not fit is refused with
// CUDA_ERROR_OUT_OF_MEMORY and no mix of processes and threads pushes the slice past its
// limit; a failed creation gives the charge back. The primary context is one per process and
// device, shared by the process's threads: it is charged once, while any retain through the
// shim holds it.

namespace {
// Serialises the primary contexts' 0 -> 1 and 1 -> 0 retain transitions with their driver
// calls, so that racing first retains charge once and a refused charge retains nothing.
// Retain, release and reset are rare (per thread or per framework start), never a hot path.
pthread_mutex_t g_primary_mu = PTHREAD_MUTEX_INITIALIZER;

// Charges one context on dev; false (nothing charged) when it does not fit. *gpu: where.
bool ChargeContext(CUdevice dev, const char* what, int* gpu) {
  *gpu = -1;
  if (!Active() || g_context_overhead <= 0) return true;
  *gpu = GpuOfDevice(dev);
  return ChargeOrRefuse(*gpu, g_context_overhead, what);
}

void ReleaseContext(int gpu) {
  if (gpu >= 0 && g_context_overhead > 0) g_account->Release(gpu, g_context_overhead);
}

// Creates a context through create() with its charge taken first; records it for cuCtxDestroy.
template <typename Create>
CUresult CountedCtxCreate(CUcontext* pctx, CUdevice dev, const char* what, Create create) {
  int gpu = -1;
  if (!ChargeContext(dev, what, &gpu)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = create();
  if (r != CUDA_SUCCESS || pctx == nullptr) {
    if (r != CUDA_SUCCESS) ReleaseContext(gpu);
    return r;
  }
  if (gpu >= 0) Record(reinterpret_cast<uint64_t>(*pctx), AllocKind::kContext, gpu, g_context_overhead);
  return r;
}

template <typename Destroy>
CUresult CountedCtxDestroy(CUcontext ctx, Destroy destroy) {
  compute::ForgetContext(ctx);  // launch_gate.h: before its events go
  if (!Active()) return destroy();
  AllocRecord rec;
  bool known = Forget(reinterpret_cast<uint64_t>(ctx), AllocKind::kContext, &rec);
  CUresult r = destroy();
  if (known) {
    if (r == CUDA_SUCCESS) ReleaseRecord(rec);
    else Record(reinterpret_cast<uint64_t>(ctx), AllocKind::kContext, rec.gpu, rec.bytes);
  }
  return r;
}
}  // namespace

// The launch gate forgets a primary context before its last release or a reset ends it
// (launch_gate.h).
GSLICE_EXPORT CUresult gslice_hook_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices) return REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
  pthread_mutex_lock(&g_primary_mu);
  const bool first = g_primary_refs[dev].load() == 0;
  int gpu = -1;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!first || ChargeContext(dev, "primary context", &gpu)) {
    r = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (r == CUDA_SUCCESS) {
      if (pctx != nullptr) g_primary_ctx[dev].store(*pctx);
      g_primary_refs[dev].fetch_add(1);
    } else if (first) {
      ReleaseContext(gpu);
    }
  }
  pthread_mutex_unlock(&g_primary_mu);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices) return REAL(cuDevicePrimaryCtxRelease_v2)(dev);
  pthread_mutex_lock(&g_primary_mu);
  if (g_primary_refs[dev].load() == 1) compute::ForgetContext(g_primary_ctx[dev].load());
  CUresult r = REAL(cuDevicePrimaryCtxRelease_v2)(dev);
  if (r == CUDA_SUCCESS && g_primary_refs[dev].load() > 0 && g_primary_refs[dev].fetch_sub(1) == 1 && Active() &&
      g_context_overhead > 0) {
    ReleaseContext(GpuOfDevice(dev));
  }
  pthread_mutex_unlock(&g_primary_mu);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices) return REAL(cuDevicePrimaryCtxReset_v2)(dev);
  pthread_mutex_lock(&g_primary_mu);
  compute::ForgetContext(g_primary_ctx[dev].load());
  CUresult r = REAL(cuDevicePrimaryCtxReset_v2)(dev);
  if (r == CUDA_SUCCESS && g_primary_refs[dev].exchange(0) > 0 && Active() && g_context_overhead > 0) {
    ReleaseContext(GpuOfDevice(dev));
  }
  pthread_mutex_unlock(&g_primary_mu);
  return r;
}

// Every cuCtxCreate the driver exports (cuda.h maps the name to the newest; programs built
// against older headers reach the older ones).
GSLICE_EXPORT CUresult gslice_hook_cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  using Fn = CUresult (*)(CUcontext*, unsigned int, CUdevice);
  return CountedCtxCreate(pctx, dev, "cuCtxCreate",
                          [&] { return reinterpret_cast<Fn>(g_real[ex::kSlot_cuCtxCreate])(pctx, flags, dev); });
}

GSLICE_EXPORT CUresult gslice_hook_cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CountedCtxCreate(pctx, dev, "cuCtxCreate", [&] { return REAL(cuCtxCreate_v2)(pctx, flags, dev); });
}

GSLICE_EXPORT CUresult gslice_hook_cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int nparams,
                                                  unsigned int flags, CUdevice dev) {
  return CountedCtxCreate(pctx, dev, "cuCtxCreate",
                          [&] { return REAL(cuCtxCreate_v3)(pctx, params, nparams, flags, dev); });
}

GSLICE_EXPORT CUresult gslice_hook_cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                                  CUdevice dev) {
  return CountedCtxCreate(pctx, dev, "cuCtxCreate", [&] { return REAL(cuCtxCreate_v4)(pctx, params, flags, dev); });
}

GSLICE_EXPORT CUresult gslice_hook_cuCtxDestroy(CUcontext ctx) {
  using Fn = CUresult (*)(CUcontext);
  return CountedCtxDestroy(ctx, [&] { return reinterpret_cast<Fn>(g_real[ex::kSlot_cuCtxDestroy])(ctx); });
}

GSLICE_EXPORT CUresult gslice_hook_cuCtxDestroy_v2(CUcontext ctx) {
  return CountedCtxDestroy(ctx, [&] { return REAL(cuCtxDestroy_v2)(ctx); });
}

// Green contexts are contexts too (cuCtxFromGreenCtx converts one without creating another).
GSLICE_EXPORT CUresult gslice_hook_cuGreenCtxCreate(CUgreenCtx* pctx, CUdevResourceDesc desc, CUdevice dev,
                                                    unsigned int flags) {
  int gpu = -1;
  if (!ChargeContext(dev, "cuGreenCtxCreate", &gpu)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = REAL(cuGreenCtxCreate)(pctx, desc, dev, flags);
  if (r != CUDA_SUCCESS) {
    ReleaseContext(gpu);
    return r;
  }
  if (gpu >= 0 && pctx != nullptr) {
    Record(reinterpret_cast<uint64_t>(*pctx), AllocKind::kContext, gpu, g_context_overhead);
  }
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuGreenCtxDestroy(CUgreenCtx ctx) {
  if (!Active()) return REAL(cuGreenCtxDestroy)(ctx);
  AllocRecord rec;
  bool known = Forget(reinterpret_cast<uint64_t>(ctx), AllocKind::kContext, &rec);
  CUresult r = REAL(cuGreenCtxDestroy)(ctx);
  if (known) {
    if (r == CUDA_SUCCESS) ReleaseRecord(rec);
    else Record(reinterpret_cast<uint64_t>(ctx), AllocKind::kContext, rec.gpu, rec.bytes);
  }
  return r;
}

// --- linear memory ----------------------------------------------------------------------

GSLICE_EXPORT CUresult gslice_hook_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  trace::ApiScope traced(trace::PlainCall("cuMemAlloc_v2", trace::ApiKind::kAlloc, bytes));
  ResumeGate();  // suspend/resume (resume_gate.h)
  if (!Active()) return REAL(cuMemAlloc_v2)(dptr, bytes);
  int gpu = CurrentGpu();
  const int64_t n = static_cast<int64_t>(bytes);
  if (!ChargeOrRefuse(gpu, n, "cuMemAlloc")) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = REAL(cuMemAlloc_v2)(dptr, bytes);
  r = RetryAfterPreemption(r, bytes, [&] { return REAL(cuMemAlloc_v2)(dptr, bytes); });
  if (r != CUDA_SUCCESS) {
    g_account->Release(gpu, n);
    return r;
  }
  Record(*dptr, AllocKind::kLinear, gpu, n);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                                      unsigned int element_size) {
  trace::ApiScope traced(trace::PlainCall("cuMemAllocPitch_v2", trace::ApiKind::kAlloc, width * height));
  ResumeGate();
  if (!Active()) return REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, element_size);
  int gpu = CurrentGpu();
  // Charge the row width rounded to the driver's pitch alignment first, then settle on the
  // pitch it chose.
  const int64_t estimate = static_cast<int64_t>((width + 511) / 512 * 512) * static_cast<int64_t>(height);
  if (!ChargeOrRefuse(gpu, estimate, "cuMemAllocPitch")) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, element_size);
  if (r != CUDA_SUCCESS) {
    g_account->Release(gpu, estimate);
    return r;
  }
  const int64_t actual = static_cast<int64_t>(*pitch) * static_cast<int64_t>(height);
  if (actual > estimate) g_account->ForceCharge(gpu, actual - estimate);
  else if (actual < estimate) g_account->Release(gpu, estimate - actual);
  Record(*dptr, AllocKind::kLinear, gpu, actual);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  trace::ApiScope traced(trace::PlainCall("cuMemAllocManaged", trace::ApiKind::kAlloc, bytes));
  if (!Active()) return REAL(cuMemAllocManaged)(dptr, bytes, flags);
  int gpu = CurrentGpu();
  const int64_t n = static_cast<int64_t>(bytes);
  if (!ChargeOrRefuse(gpu, n, "cuMemAllocManaged")) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = REAL(cuMemAllocManaged)(dptr, bytes, flags);
  if (r != CUDA_SUCCESS) {
    g_account->Release(gpu, n);
    return r;
  }
  Record(*dptr, AllocKind::kLinear, gpu, n);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuMemFree_v2(CUdeviceptr dptr) {
  trace::ApiScope traced(trace::PlainCall("cuMemFree_v2", trace::ApiKind::kFree));
  if (!Active()) return REAL(cuMemFree_v2)(dptr);
  AllocRecord rec;
  bool known = Forget(dptr, AllocKind::kLinear, &rec);
  CUresult r = REAL(cuMemFree_v2)(dptr);
  if (known) {
    if (r == CUDA_SUCCESS) ReleaseRecord(rec);
    else Record(dptr, AllocKind::kLinear, rec.gpu, rec.bytes);
  }
  return r;
}

// --- stream-ordered allocation ------------------------------------------------------------

namespace {
// Stream capture turns an async allocation into a graph memory node: the memory is reserved
// when the graph runs, and SyncGraphMemory charges it then.
bool Capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

template <typename Call>
CUresult CountedAsyncAlloc(CUdeviceptr* dptr, size_t bytes, CUstream stream, const char* what, Call call) {
  ResumeGate();
  if (!Active()) return call();
  int gpu = CurrentGpu();
  const int64_t n = static_cast<int64_t>(bytes);
  if (Capturing(stream)) {
    if (!Fits(gpu, n)) return CUDA_ERROR_OUT_OF_MEMORY;
    g_graph_memory_seen.store(true, std::memory_order_relaxed);
    return call();
  }
  if (!ChargeOrRefuse(gpu, n, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    g_account->Release(gpu, n);
    return r;
  }
  Record(*dptr, AllocKind::kLinear, gpu, n);
  return r;
}

template <typename Call>
CUresult CountedAsyncFree(CUdeviceptr dptr, Call call) {
  if (!Active()) return call();
  AllocRecord rec;
  bool known = Forget(dptr, AllocKind::kLinear, &rec);
  CUresult r = call();
  if (known) {
    if (r == CUDA_SUCCESS) ReleaseRecord(rec);
    else Record(dptr, AllocKind::kLinear, rec.gpu, rec.bytes);
  }
  return r;
}
}  // namespace

GSLICE_EXPORT CUresult gslice_hook_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  trace::ApiScope traced(trace::StreamCall("cuMemAllocAsync", trace::ApiKind::kAlloc, stream, false, bytes));
  return CountedAsyncAlloc(dptr, bytes, stream, "cuMemAllocAsync",
                           [&] { return REAL(cuMemAllocAsync)(dptr, bytes, stream); });
}

GSLICE_EXPORT CUresult gslice_hook_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  trace::ApiScope traced(trace::StreamCall("cuMemAllocAsync_ptsz", trace::ApiKind::kAlloc, stream, true, bytes));
  return CountedAsyncAlloc(dptr, bytes, stream, "cuMemAllocAsync",
                           [&] { return REAL(cuMemAllocAsync_ptsz)(dptr, bytes, stream); });
}

GSLICE_EXPORT CUresult gslice_hook_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                           CUstream stream) {
  trace::ApiScope traced(trace::StreamCall("cuMemAllocFromPoolAsync", trace::ApiKind::kAlloc, stream, false, bytes));
  return CountedAsyncAlloc(dptr, bytes, stream, "cuMemAllocFromPoolAsync",
                           [&] { return REAL(cuMemAllocFromPoolAsync)(dptr, bytes, pool, stream); });
}

GSLICE_EXPORT CUresult gslice_hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                                CUstream stream) {
  trace::ApiScope traced(
      trace::StreamCall("cuMemAllocFromPoolAsync_ptsz", trace::ApiKind::kAlloc, stream, true, bytes));
  return CountedAsyncAlloc(dptr, bytes, stream, "cuMemAllocFromPoolAsync",
                           [&] { return REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, bytes, pool, stream); });
}

GSLICE_EXPORT CUresult gslice_hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  trace::ApiScope traced(trace::StreamCall("cuMemFreeAsync", trace::ApiKind::kFree, stream, false));
  return CountedAsyncFree(dptr, [&] { return REAL(cuMemFreeAsync)(dptr, stream); });
}

GSLICE_EXPORT CUresult gslice_hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  trace::ApiScope traced(trace::StreamCall("cuMemFreeAsync_ptsz", trace::ApiKind::kFree, stream, true));
  return CountedAsyncFree(dptr, [&] { return REAL(cuMemFreeAsync_ptsz)(dptr, stream); });
}

// --- virtual memory management -------------------------------------------------------------

GSLICE_EXPORT CUresult gslice_hook_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                               const CUmemAllocationProp* prop, unsigned long long flags) {
  trace::ApiScope traced(trace::PlainCall("cuMemCreate", trace::ApiKind::kAlloc, size));
  ResumeGate();
  if (!Active() || prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return REAL(cuMemCreate)(handle, size, prop, flags);
  }
  int gpu = GpuOfDevice(prop->location.id);
  const int64_t n = static_cast<int64_t>(size);
  if (!ChargeOrRefuse(gpu, n, "cuMemCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = REAL(cuMemCreate)(handle, size, prop, flags);
  r = RetryAfterPreemption(r, size, [&] { return REAL(cuMemCreate)(handle, size, prop, flags); });
  if (r != CUDA_SUCCESS) {
    g_account->Release(gpu, n);
    return r;
  }
  Record(*handle, AllocKind::kVmmHandle, gpu, n);
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuMemRelease(CUmemGenericAllocationHandle handle) {
  trace::ApiScope traced(trace::PlainCall("cuMemRelease", trace::ApiKind::kFree));
  if (!Active()) return REAL(cuMemRelease)(handle);
  AllocRecord rec;
  bool known = Forget(handle, AllocKind::kVmmHandle, &rec);
  CUresult r = REAL(cuMemRelease)(handle);
  if (known) {
    if (r == CUDA_SUCCESS) ReleaseRecord(rec);
    else Record(handle, AllocKind::kVmmHandle, rec.gpu, rec.bytes);
  }
  return r;
}

// --- arrays --------------------------------------------------------------------------------

namespace {
template <typename Call>
CUresult CountedArrayCreate(void* const* out_handle, AllocKind kind, int64_t bytes, const char* what, Call call) {
  if (!Active()) return call();
  int gpu = CurrentGpu();
  if (!ChargeOrRefuse(gpu, bytes, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    g_account->Release(gpu, bytes);
    return r;
  }
  Record(reinterpret_cast<uint64_t>(*out_handle), kind, gpu, bytes);
  return r;
}

template <typename Call>
CUresult CountedArrayDestroy(uint64_t key, AllocKind kind, Call call) {
  if (!Active()) return call();
  AllocRecord rec;
  bool known = Forget(key, kind, &rec);
  CUresult r = call();
  if (known) {
    if (r == CUDA_SUCCESS) ReleaseRecord(rec);
    else Record(key, kind, rec.gpu, rec.bytes);
  }
  return r;
}
}  // namespace

GSLICE_EXPORT CUresult gslice_hook_cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr || handle == nullptr) return REAL(cuArrayCreate_v2)(handle, desc);
  int64_t bytes = ArrayBytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format);
  return CountedArrayCreate(reinterpret_cast<void* const*>(handle), AllocKind::kArray, bytes, "cuArrayCreate",
                            [&] { return REAL(cuArrayCreate_v2)(handle, desc); });
}

GSLICE_EXPORT CUresult gslice_hook_cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr || handle == nullptr) return REAL(cuArray3DCreate_v2)(handle, desc);
  int64_t bytes = ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format);
  return CountedArrayCreate(reinterpret_cast<void* const*>(handle), AllocKind::kArray, bytes, "cuArray3DCreate",
                            [&] { return REAL(cuArray3DCreate_v2)(handle, desc); });
}

GSLICE_EXPORT CUresult gslice_hook_cuArrayDestroy(CUarray array) {
  return CountedArrayDestroy(reinterpret_cast<uint64_t>(array), AllocKind::kArray,
                             [&] { return REAL(cuArrayDestroy)(array); });
}

GSLICE_EXPORT CUresult gslice_hook_cuMipmappedArrayCreate(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                          unsigned int levels) {
  if (desc == nullptr || handle == nullptr) return REAL(cuMipmappedArrayCreate)(handle, desc, levels);
  int64_t bytes = 0;
  size_t w = desc->Width, h = desc->Height, d = desc->Depth;
  for (unsigned l = 0; l < levels && l < 32; ++l) {
    bytes += ArrayBytes(w, h, d, desc->NumChannels, desc->Format);
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : h;
    d = d > 1 ? d / 2 : d;
  }
  return CountedArrayCreate(reinterpret_cast<void* const*>(handle), AllocKind::kMipmapped, bytes,
                            "cuMipmappedArrayCreate", [&] { return REAL(cuMipmappedArrayCreate)(handle, desc, levels); });
}

GSLICE_EXPORT CUresult gslice_hook_cuMipmappedArrayDestroy(CUmipmappedArray array) {
  return CountedArrayDestroy(reinterpret_cast<uint64_t>(array), AllocKind::kMipmapped,
                             [&] { return REAL(cuMipmappedArrayDestroy)(array); });
}

// --- graph memory --------------------------------------------------------------------------

GSLICE_EXPORT CUresult gslice_hook_cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                          size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (Active() && params != nullptr) {
    int gpu = params->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? GpuOfDevice(params->poolProps.location.id)
                                                                               : -1;
    if (!Fits(gpu, static_cast<int64_t>(params->bytesize))) return CUDA_ERROR_OUT_OF_MEMORY;
    g_graph_memory_seen.store(true, std::memory_order_relaxed);
  }
  return REAL(cuGraphAddMemAllocNode)(node, graph, deps, ndeps, params);
}

GSLICE_EXPORT CUresult gslice_hook_cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                               unsigned long long flags) {
  CUresult r = REAL(cuGraphInstantiateWithFlags)(exec, graph, flags);
  if (r == CUDA_SUCCESS && Active()) SyncGraphMemory(CurrentDevice());
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                                CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  CUresult r = REAL(cuGraphInstantiateWithParams)(exec, graph, params);
  if (r == CUDA_SUCCESS && Active()) SyncGraphMemory(CurrentDevice());
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                                     CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  CUresult r = REAL(cuGraphInstantiateWithParams_ptsz)(exec, graph, params);
  if (r == CUDA_SUCCESS && Active()) SyncGraphMemory(CurrentDevice());
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  trace::ApiScope traced(trace::StreamCall("cuGraphLaunch", trace::ApiKind::kLaunch, stream, false));
  ResumeGate();
  const CUcontext ctx = RaiseDefaultStream(stream, false);  // the default streams at the class's priority
  const bool gated = compute::LaunchThroughGate();  // compute slices (launch_gate.h)
  // A graph is timed as one kernel (kernel_clock.h).
  const compute::KernelShape shape{.function = exec};
  const compute::LaunchTicket ticket = gated ? compute::BeforeLaunch(stream, false, &shape, ctx) : compute::LaunchTicket{};
  CUresult r = REAL(cuGraphLaunch)(exec, stream);
  compute::AfterLaunch(ticket);
  if (r == CUDA_SUCCESS && g_graph_memory_seen.load(std::memory_order_relaxed) && Active()) {
    SyncGraphMemory(CurrentDevice());
  }
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  trace::ApiScope traced(trace::StreamCall("cuGraphLaunch_ptsz", trace::ApiKind::kLaunch, stream, true));
  ResumeGate();
  const CUcontext ctx = RaiseDefaultStream(stream, true);
  const bool gated = compute::LaunchThroughGate();  // compute slices (launch_gate.h)
  const compute::KernelShape shape{.function = exec};
  const compute::LaunchTicket ticket = gated ? compute::BeforeLaunch(stream, true, &shape, ctx) : compute::LaunchTicket{};
  CUresult r = REAL(cuGraphLaunch_ptsz)(exec, stream);
  compute::AfterLaunch(ticket);
  if (r == CUDA_SUCCESS && g_graph_memory_seen.load(std::memory_order_relaxed) && Active()) {
    SyncGraphMemory(CurrentDevice());
  }
  return r;
}

GSLICE_EXPORT CUresult gslice_hook_cuDeviceGraphMemTrim(CUdevice dev) {
  CUresult r = REAL(cuDeviceGraphMemTrim)(dev);
  if (r == CUDA_SUCCESS && Active()) SyncGraphMemory(dev);
  return r;
}

// ---------------------------------------------------------------------------------------
// Load-time setup: the only code that runs before main.

namespace {

struct HookEntry {
  int slot;
  void* hook;
};

const HookEntry kHookEntries[] = {
#define GSLICE_HOOK(sym) {ex::kSlot_##sym, reinterpret_cast<void*>(&gslice_hook_##sym)},
#include "hooks.def"
#undef GSLICE_HOOK
};
static_assert(sizeof(kHookEntries) / sizeof(kHookEntries[0]) == ex::kHookCount);

__attribute__((constructor)) void GsliceCudaShimInit() {
  ForbidShrinkGuard();  // the application's signal handlers are its own (shrink_guard.h)
  InitLog();
  AskMpsForClassPriority();  // compute slices (launch_hooks.h)
  ReadStreamPriorityOption();
  trace::OfferNvtxInjection();  // timelines (trace_recorder.h)
  LoadRealLibrary("libcuda.so.1", OptionValue(Option::RealDriver), "GSLICE_REAL_DRIVER",
                  reinterpret_cast<const void*>(&GsliceCudaShimInit), &g_real_library);
  FillSlots(g_real_library.handle, ex::kNames, ex::kCount, gslice_cuda_slots, g_real,
            reinterpret_cast<void*>(&gslice_cuda_unsupported));
  for (const HookEntry& h : kHookEntries) __atomic_store_n(&gslice_cuda_slots[h.slot], h.hook, __ATOMIC_RELEASE);
  BuildProcMap();
  const char* overhead = OptionValue(Option::ContextOverhead);
  ParsedSize p = ParseSize(overhead);
  if (p.ok) {
    g_context_overhead = static_cast<int64_t>(p.bytes);
  } else {
    Log(LogLevel::kError, "GSLICE_CONTEXT_OVERHEAD=%s: %s; using %s", overhead, p.error,
        GetOptionInfo(Option::ContextOverhead).default_value);
    g_context_overhead = static_cast<int64_t>(ParseSize(GetOptionInfo(Option::ContextOverhead).default_value).bytes);
  }
  g_account = new (g_account_storage) SliceAccount();
}

__attribute__((destructor)) void GsliceCudaShimFini() {
  if (g_account != nullptr) g_account->Shutdown();
}

}  // namespace
