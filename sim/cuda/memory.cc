// Device, managed, host and pool memory, VMM, arrays, memcpy and memset.
//
// Simulated device memory is host memory of this process (anonymous MAP_NORESERVE
// mappings, so untouched capacity costs nothing); CUdeviceptr values are its addresses.
// Capacity is charged to the node (Node::Charge) so that processes share it.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "driver.h"

using namespace gslice::sim;

namespace gslice::sim {
namespace {

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

void* MapAnonymous(size_t size) {
  void* p = mmap(nullptr, RoundUp(size, kChargeGranule), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Charges and maps a device allocation of ctx's device. REQUIRES: d->mu not held.
CUresult AllocateDevice(Driver* d, CUctx_st* ctx, size_t size, AllocKind kind, MemPool* pool,
                        uint32_t device, CUdeviceptr* out) {
  const size_t charge = RoundUp(size, kChargeGranule);
  if (!d->node->Charge(d->slot, device, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = MapAnonymous(size);
  if (p == nullptr) {
    d->node->Uncharge(d->slot, device, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = size;
  a.mapped = RoundUp(size, kChargeGranule);
  a.charged = charge;
  a.device = device;
  a.ctx = ctx;
  a.kind = kind;
  a.pool = pool;
  {
    std::lock_guard<std::mutex> g(d->mu);
    d->allocations[a.base] = a;
  }
  *out = a.base;
  return CUDA_SUCCESS;
}

// Unmaps and uncharges the allocation at base. REQUIRES: d->mu held; returns the bytes to
// uncharge (the caller uncharges after dropping the lock).
size_t ReleaseLocked(Driver* d, std::map<uintptr_t, Allocation>::iterator it) {
  Allocation a = it->second;
  d->allocations.erase(it);
  if (a.mapped > 0) munmap(reinterpret_cast<void*>(a.base), a.mapped);
  return d->checkpointed ? 0 : a.charged;
}

std::mutex g_arrays_mu;
std::map<void*, std::unique_ptr<CUarray_st>> g_arrays;
std::map<void*, std::unique_ptr<CUmipmappedArray_st>> g_mipmapped;
std::vector<std::unique_ptr<MemPool>> g_pool_storage;  // pools live as long as the process

MemPool* DefaultPool(Driver* d, int ordinal) {
  std::lock_guard<std::mutex> g(d->mu);
  MemPool*& p = d->default_pool[ordinal];
  if (p == nullptr) {
    g_pool_storage.push_back(std::make_unique<MemPool>());
    p = g_pool_storage.back().get();
    p->device = d->visible[ordinal];
    p->ordinal = static_cast<uint32_t>(ordinal);
    p->is_default = true;
    d->pools.insert(p);
  }
  return p;
}

MemPool* ToPool(CUmemoryPool h) { return reinterpret_cast<MemPool*>(h); }
CUmemoryPool ToHandle(MemPool* p) { return reinterpret_cast<CUmemoryPool>(p); }

// Releases cached blocks of pool until its reservation is at most keep bytes.
void TrimPool(Driver* d, MemPool* pool, uint64_t keep) {
  std::vector<std::pair<uint32_t, size_t>> uncharge;
  {
    std::lock_guard<std::mutex> g(d->mu);
    while (pool->reserved_current > keep && !pool->cached.empty()) {
      auto c = std::prev(pool->cached.end());  // largest first
      auto it = d->allocations.find(c->second);
      pool->reserved_current -= c->first;
      pool->cached.erase(c);
      if (it != d->allocations.end()) uncharge.push_back({pool->device, ReleaseLocked(d, it)});
    }
  }
  for (auto& [dev, n] : uncharge) {
    if (n > 0) d->node->Uncharge(d->slot, dev, n);
  }
}

CUresult AllocFromPool(Driver* d, MemPool* pool, size_t size, CUdeviceptr* out) {
  const size_t rounded = RoundUp(size, kChargeGranule);
  {
    std::lock_guard<std::mutex> g(d->mu);
    auto c = pool->cached.find(rounded);
    if (c != pool->cached.end()) {
      *out = c->second;
      pool->cached.erase(c);
      pool->used_current += rounded;
      if (pool->used_current > pool->used_high) pool->used_high = pool->used_current;
      return CUDA_SUCCESS;
    }
  }
  CUctx_st* ctx = CurrentContext();
  CUresult r = AllocateDevice(d, ctx, rounded, AllocKind::kPool, pool, pool->device, out);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    TrimPool(d, pool, 0);  // give cached blocks back and try once more
    r = AllocateDevice(d, ctx, rounded, AllocKind::kPool, pool, pool->device, out);
  }
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(d->mu);
  pool->used_current += rounded;
  pool->reserved_current += rounded;
  if (pool->used_current > pool->used_high) pool->used_high = pool->used_current;
  if (pool->reserved_current > pool->reserved_high) pool->reserved_high = pool->reserved_current;
  return CUDA_SUCCESS;
}

// Frees ptr now: pool blocks go back to their pool, the rest is unmapped.
CUresult FreeNow(Driver* d, CUdeviceptr ptr, bool pool_only) {
  size_t uncharge = 0;
  uint32_t dev = 0;
  {
    std::lock_guard<std::mutex> g(d->mu);
    auto it = d->allocations.find(ptr);
    if (it == d->allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    Allocation& a = it->second;
    if (a.kind == AllocKind::kPool) {
      a.pool->used_current -= a.size;
      a.pool->cached.insert({a.size, a.base});
      return CUDA_SUCCESS;
    }
    if (pool_only || (a.kind != AllocKind::kDevice && a.kind != AllocKind::kManaged)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    dev = a.device;
    uncharge = ReleaseLocked(d, it);
  }
  if (uncharge > 0) d->node->Uncharge(d->slot, dev, uncharge);
  return CUDA_SUCCESS;
}

}  // namespace

const Allocation* FindAllocationLocked(Driver* d, uintptr_t p, size_t n) {
  auto it = d->allocations.upper_bound(p);
  if (it == d->allocations.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  if (p < a.base || p - a.base > a.size || n > a.size - (p - a.base)) return nullptr;
  return &a;
}

void ResetMemoryLocksAfterFork() { new (&g_arrays_mu) std::mutex(); }

bool DeviceRangeValid(uintptr_t p, size_t n) {
  Driver* d = GetDriver();
  std::lock_guard<std::mutex> g(d->mu);
  return FindAllocationLocked(d, p, n) != nullptr;
}

void TrimPoolsToThreshold() {
  Driver* d = GetDriver();
  std::vector<MemPool*> pools;
  {
    std::lock_guard<std::mutex> g(d->mu);
    pools.assign(d->pools.begin(), d->pools.end());
  }
  for (MemPool* p : pools) TrimPool(d, p, p->release_threshold);
}

}  // namespace gslice::sim

// ---- allocation ----

GSLICE_SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiGate gate;
  return AllocateDevice(d, ctx, size, AllocKind::kDevice, nullptr, ctx->device, dptr);
}

GSLICE_SIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                              size_t height, unsigned int element_size) {
  if (dptr == nullptr || pitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (width == 0 || height == 0 ||
      (element_size != 4 && element_size != 8 && element_size != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiGate gate;
  const size_t p = RoundUp(width, 512);
  CUresult r = AllocateDevice(d, ctx, p * height, AllocKind::kDevice, nullptr, ctx->device, dptr);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

GSLICE_SIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned int flags) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiGate gate;
  // Charged to the device up front: the sim never oversubscribes managed memory.
  return AllocateDevice(d, ctx, size, AllocKind::kManaged, nullptr, ctx->device, dptr);
}

GSLICE_SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (ptr == 0) return CUDA_SUCCESS;
  ApiGate gate;
  // Freeing synchronises with work in flight, as the driver does.
  SynchronizeContext(ctx);
  CUresult r = FreeNow(d, ptr, false);
  if (r == CUDA_SUCCESS) TrimPoolsToThreshold();
  return r;
}

GSLICE_SIM_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  // As the driver: either output may be null, and only the other is written.
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  ApiGate gate;
  const uint64_t total = d->node->device(ctx->device).total_memory;
  const uint64_t used = d->node->Used(ctx->device);
  if (total_bytes != nullptr) *total_bytes = total;
  if (free_bytes != nullptr) *free_bytes = used >= total ? 0 : total - used;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size,
                                                   CUdeviceptr ptr) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(d->mu);
  const Allocation* a = FindAllocationLocked(d, ptr, 0);
  if (a == nullptr || a->kind == AllocKind::kHost || a->kind == AllocKind::kHostRegistered) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (base != nullptr) *base = a->base;
  if (size != nullptr) *size = a->size;
  return CUDA_SUCCESS;
}

// ---- host memory ----

GSLICE_SIM_EXPORT CUresult cuMemHostAlloc(void** pp, size_t size, unsigned int flags) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (size == 0 || (flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiGate gate;
  void* p = MapAnonymous(size);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = size;
  a.mapped = RoundUp(size, kChargeGranule);
  a.ctx = ctx;
  a.kind = AllocKind::kHost;
  std::lock_guard<std::mutex> g(d->mu);
  d->allocations[a.base] = a;
  *pp = p;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t size) {
  return cuMemHostAlloc(pp, size, 0);
}

GSLICE_SIM_EXPORT CUresult cuMemFreeHost(void* p) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  ApiGate gate;
  std::lock_guard<std::mutex> g(d->mu);
  auto it = d->allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == d->allocations.end() || it->second.kind != AllocKind::kHost) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ReleaseLocked(d, it);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t size, unsigned int flags) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (p == nullptr || size == 0 || (flags & ~0xFu) != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiGate gate;
  std::lock_guard<std::mutex> g(d->mu);
  uintptr_t base = reinterpret_cast<uintptr_t>(p);
  auto next = d->allocations.lower_bound(base);
  if (FindAllocationLocked(d, base, 0) != nullptr ||
      (next != d->allocations.end() && next->first < base + size)) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  Allocation a;
  a.base = base;
  a.size = size;
  a.ctx = ctx;
  a.kind = AllocKind::kHostRegistered;
  d->allocations[base] = a;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemHostUnregister(void* p) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  ApiGate gate;
  std::lock_guard<std::mutex> g(d->mu);
  auto it = d->allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == d->allocations.end() || it->second.kind != AllocKind::kHostRegistered) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  d->allocations.erase(it);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p,
                                                        unsigned int flags) {
  if (dptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(d->mu);
  const Allocation* a = FindAllocationLocked(d, reinterpret_cast<uintptr_t>(p), 0);
  if (a == nullptr || (a->kind != AllocKind::kHost && a->kind != AllocKind::kHostRegistered)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

// ---- copies and fills ----

namespace {

enum class Check { kNone, kDst, kSrc, kBoth };

CUresult Copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool async, Check check,
              bool pt) {
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if ((check == Check::kDst || check == Check::kBoth) && !DeviceRangeValid(dst, n)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((check == Check::kSrc || check == Check::kBoth) && !DeviceRangeValid(src, n)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult sticky = static_cast<CUresult>(s->ctx->sticky_error.load()); sticky != CUDA_SUCCESS) {
    return sticky;
  }
  ApiGate gate;
  uint64_t seq = Enqueue(s, [dst, src, n] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  });
  if (!async) s->WaitFor(seq);
  return CUDA_SUCCESS;
}

template <typename T>
CUresult Fill(CUdeviceptr dst, T value, size_t count, CUstream h, bool async, bool pt) {
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (count == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0 || !DeviceRangeValid(dst, count * sizeof(T))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiGate gate;
  uint64_t seq = Enqueue(s, [dst, value, count] {
    T* p = reinterpret_cast<T*>(dst);
    for (size_t i = 0; i < count; ++i) p[i] = value;
  });
  if (!async) s->WaitFor(seq);
  return CUDA_SUCCESS;
}

CUdeviceptr HostPtr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

// Synchronous copies use the default stream; the _ptds variants the per-thread one.
#define COPY_PAIR(name, sync_suffix, params, ...)                                    \
  GSLICE_SIM_EXPORT CUresult name params { return Copy(__VA_ARGS__, false); }        \
  GSLICE_SIM_EXPORT CUresult name##sync_suffix params { return Copy(__VA_ARGS__, true); }

COPY_PAIR(cuMemcpy, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), dst, src, n, nullptr, false, Check::kNone)
COPY_PAIR(cuMemcpyHtoD_v2, _ptds, (CUdeviceptr dst, const void* src, size_t n), dst, HostPtr(src), n, nullptr, false, Check::kDst)
COPY_PAIR(cuMemcpyDtoH_v2, _ptds, (void* dst, CUdeviceptr src, size_t n), HostPtr(dst), src, n, nullptr, false, Check::kSrc)
COPY_PAIR(cuMemcpyDtoD_v2, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), dst, src, n, nullptr, false, Check::kBoth)
COPY_PAIR(cuMemcpyAsync, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h), dst, src, n, h, true, Check::kNone)
COPY_PAIR(cuMemcpyHtoDAsync_v2, _ptsz, (CUdeviceptr dst, const void* src, size_t n, CUstream h), dst, HostPtr(src), n, h, true, Check::kDst)
COPY_PAIR(cuMemcpyDtoHAsync_v2, _ptsz, (void* dst, CUdeviceptr src, size_t n, CUstream h), HostPtr(dst), src, n, h, true, Check::kSrc)
COPY_PAIR(cuMemcpyDtoDAsync_v2, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h), dst, src, n, h, true, Check::kBoth)

#define FILL_PAIR(name, sfx, T, params, ...)                                              \
  GSLICE_SIM_EXPORT CUresult name params { return Fill<T>(__VA_ARGS__, false); }           \
  GSLICE_SIM_EXPORT CUresult name##sfx params { return Fill<T>(__VA_ARGS__, true); }

FILL_PAIR(cuMemsetD8_v2, _ptds, uint8_t, (CUdeviceptr dst, unsigned char v, size_t n), dst, v, n, nullptr, false)
FILL_PAIR(cuMemsetD16_v2, _ptds, uint16_t, (CUdeviceptr dst, unsigned short v, size_t n), dst, v, n, nullptr, false)
FILL_PAIR(cuMemsetD32_v2, _ptds, uint32_t, (CUdeviceptr dst, unsigned int v, size_t n), dst, v, n, nullptr, false)
FILL_PAIR(cuMemsetD8Async, _ptsz, uint8_t, (CUdeviceptr dst, unsigned char v, size_t n, CUstream h), dst, v, n, h, true)
FILL_PAIR(cuMemsetD16Async, _ptsz, uint16_t, (CUdeviceptr dst, unsigned short v, size_t n, CUstream h), dst, v, n, h, true)
FILL_PAIR(cuMemsetD32Async, _ptsz, uint32_t, (CUdeviceptr dst, unsigned int v, size_t n, CUstream h), dst, v, n, h, true)

// ---- stream-ordered allocation and pools ----

namespace {

CUresult AllocAsync(CUdeviceptr* dptr, size_t size, MemPool* pool, CUstream h, bool pt) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiGate gate;
  if (pool == nullptr) {
    int ordinal = static_cast<int>(s->ctx->ordinal);
    {
      std::lock_guard<std::mutex> g(d->mu);
      pool = d->current_pool[ordinal];
    }
    if (pool == nullptr) pool = DefaultPool(d, ordinal);
  }
  // The block is taken at once; work queued before it cannot touch it anyway.
  return AllocFromPool(d, pool, size, dptr);
}

CUresult FreeAsync(CUdeviceptr ptr, CUstream h, bool pt) {
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> g(d->mu);
    auto it = d->allocations.find(ptr);
    if (it == d->allocations.end() ||
        (it->second.kind != AllocKind::kPool && it->second.kind != AllocKind::kDevice)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  ApiGate gate;
  Enqueue(s, [d, ptr] { FreeNow(d, ptr, false); });
  return CUDA_SUCCESS;
}

bool ValidPoolLocation(Driver* d, const CUmemLocation& loc) {
  return loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id >= 0 &&
         loc.id < static_cast<int>(d->visible.size());
}

}  // namespace

GSLICE_SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream h) {
  return AllocAsync(dptr, size, nullptr, h, false);
}
GSLICE_SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream h) {
  return AllocAsync(dptr, size, nullptr, h, true);
}
GSLICE_SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size,
                                                   CUmemoryPool pool, CUstream h) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, size, ToPool(pool), h, false);
}
GSLICE_SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size,
                                                        CUmemoryPool pool, CUstream h) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, size, ToPool(pool), h, true);
}
GSLICE_SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream h) {
  return FreeAsync(ptr, h, false);
}
GSLICE_SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream h) {
  return FreeAsync(ptr, h, true);
}

GSLICE_SIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice dev) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  *out = ToHandle(DefaultPool(d, dev));
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* out, CUdevice dev) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  MemPool* p;
  {
    std::lock_guard<std::mutex> g(d->mu);
    p = d->current_pool[dev];
  }
  *out = ToHandle(p != nullptr ? p : DefaultPool(d, dev));
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  std::lock_guard<std::mutex> g(d->mu);
  MemPool* p = ToPool(pool);
  if (p == nullptr || d->pools.count(p) == 0 || p->ordinal != static_cast<uint32_t>(dev)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  d->current_pool[dev] = p;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (out == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || !ValidPoolLocation(d, props->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> g(d->mu);
  g_pool_storage.push_back(std::make_unique<MemPool>());
  MemPool* p = g_pool_storage.back().get();
  p->ordinal = static_cast<uint32_t>(props->location.id);
  p->device = d->visible[props->location.id];
  d->pools.insert(p);
  *out = ToHandle(p);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  REQUIRE_INIT(d);
  MemPool* p = ToPool(pool);
  {
    std::lock_guard<std::mutex> g(d->mu);
    if (p == nullptr || d->pools.count(p) == 0 || p->is_default) return CUDA_ERROR_INVALID_VALUE;
  }
  TrimPool(d, p, 0);
  std::lock_guard<std::mutex> g(d->mu);
  d->pools.erase(p);
  for (auto& cur : d->current_pool) {
    if (cur == p) cur = nullptr;
  }
  // Blocks still allocated stay valid until freed (FreeNow returns them to the pool,
  // which is no longer trimmed: they are released when the context goes).
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  REQUIRE_INIT(d);
  MemPool* p = ToPool(pool);
  {
    std::lock_guard<std::mutex> g(d->mu);
    if (p == nullptr || d->pools.count(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  TrimPool(d, p, keep);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                 void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  MemPool* p = ToPool(pool);
  std::lock_guard<std::mutex> g(d->mu);
  if (p == nullptr || d->pools.count(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t v64 = *static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return CUDA_SUCCESS;  // reuse policy does not change what the sim does
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = v64;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (v64 != 0) return CUDA_ERROR_INVALID_VALUE;
      p->reserved_high = p->reserved_current;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (v64 != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used_current;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

GSLICE_SIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                 void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  MemPool* p = ToPool(pool);
  std::lock_guard<std::mutex> g(d->mu);
  if (p == nullptr || d->pools.count(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* v64 = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *v64 = p->release_threshold; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *v64 = p->reserved_current; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *v64 = p->reserved_high; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *v64 = p->used_current; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *v64 = p->used_high; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---- virtual memory management ----

namespace {
bool ValidAllocationProp(Driver* d, const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         ValidPoolLocation(d, prop->location);
}
}  // namespace

GSLICE_SIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                         const CUmemAllocationProp* prop,
                                                         CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (!ValidAllocationProp(d, prop) ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (flags != 0 || size == 0 || size % kVmmGranularity != 0 || !ValidAllocationProp(d, prop)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiGate gate;
  const uint32_t dev = d->visible[prop->location.id];
  if (!d->node->Charge(d->slot, dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("gslice-sim-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    d->node->Uncharge(d->slot, dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> g(d->mu);
  unsigned long long id = d->next_physical++;
  PhysicalAllocation& p = d->physical[id];
  p.fd = fd;
  p.size = size;
  p.device = dev;
  p.charged = size;
  *handle = id;
  return CUDA_SUCCESS;
}

namespace {
// Frees a physical allocation once it is released and unmapped. REQUIRES: d->mu held.
size_t MaybeFreePhysicalLocked(Driver* d, unsigned long long id, uint32_t* dev) {
  auto it = d->physical.find(id);
  if (it == d->physical.end() || !it->second.released || it->second.mappings > 0) return 0;
  close(it->second.fd);
  *dev = it->second.device;
  size_t n = d->checkpointed ? 0 : it->second.charged;
  d->physical.erase(it);
  return n;
}
}  // namespace

GSLICE_SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  REQUIRE_INIT(d);
  ApiGate gate;
  size_t n;
  uint32_t dev = 0;
  {
    std::lock_guard<std::mutex> g(d->mu);
    auto it = d->physical.find(handle);
    if (it == d->physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
    it->second.released = true;
    n = MaybeFreePhysicalLocked(d, handle, &dev);
  }
  if (n > 0) d->node->Uncharge(d->slot, dev, n);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags) {
  (void)addr;  // a hint only
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (size == 0 || size % kVmmGranularity != 0 || flags != 0 ||
      (alignment != 0 && (alignment & (alignment - 1)) != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (alignment < kVmmGranularity) alignment = kVmmGranularity;
  const size_t span = size + alignment;
  void* m = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t raw = reinterpret_cast<uintptr_t>(m);
  uintptr_t base = (raw + alignment - 1) / alignment * alignment;
  if (base > raw) munmap(m, base - raw);
  if (raw + span > base + size) munmap(reinterpret_cast<void*>(base + size), raw + span - base - size);
  std::lock_guard<std::mutex> g(d->mu);
  d->reservations[base].size = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(d->mu);
  auto it = d->reservations.find(ptr);
  if (it == d->reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto m = d->vmm_mappings.lower_bound(ptr); m != d->vmm_mappings.end() && m->first < ptr + size;
       ++m) {
    return CUDA_ERROR_INVALID_VALUE;  // still mapped
  }
  munmap(reinterpret_cast<void*>(ptr), size);
  d->reservations.erase(it);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                    CUmemGenericAllocationHandle handle, unsigned long long flags) {
  REQUIRE_INIT(d);
  if (flags != 0 || size == 0 || size % kVmmGranularity != 0 || offset % kVmmGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiGate gate;
  std::lock_guard<std::mutex> g(d->mu);
  auto ph = d->physical.find(handle);
  if (ph == d->physical.end() || ph->second.released || offset + size > ph->second.size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto r = d->reservations.upper_bound(ptr);
  if (r == d->reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr < r->first || ptr + size > r->first + r->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto next = d->vmm_mappings.lower_bound(ptr);
  if (next != d->vmm_mappings.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != d->vmm_mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  void* m = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                 ph->second.fd, static_cast<off_t>(offset));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  d->vmm_mappings[ptr] = VmmMapping{size, handle, false};
  ++ph->second.mappings;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                          size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  for (size_t i = 0; i < count; ++i) {
    if (!ValidPoolLocation(d, desc[i].location)) return CUDA_ERROR_INVALID_DEVICE;
  }
  CUmemAccess_flags access = desc[count - 1].flags;
  if (access != CU_MEM_ACCESS_FLAGS_PROT_NONE && access != CU_MEM_ACCESS_FLAGS_PROT_READ &&
      access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiGate gate;
  std::lock_guard<std::mutex> g(d->mu);
  // The range must be covered by mappings, back to back.
  uintptr_t cursor = ptr;
  auto it = d->vmm_mappings.find(ptr);
  std::vector<std::map<uintptr_t, VmmMapping>::iterator> covered;
  while (cursor < ptr + size) {
    if (it == d->vmm_mappings.end() || it->first != cursor) return CUDA_ERROR_INVALID_VALUE;
    covered.push_back(it);
    cursor += it->second.size;
    ++it;
  }
  if (cursor != ptr + size) return CUDA_ERROR_INVALID_VALUE;
  int prot = access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
             : access == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                          : PROT_NONE;
  for (auto m : covered) {
    if (!d->checkpointed) mprotect(reinterpret_cast<void*>(m->first), m->second.size, prot);
    m->second.accessible = prot != PROT_NONE;
    if (m->second.accessible) {
      Allocation a;
      a.base = m->first;
      a.size = m->second.size;
      a.kind = AllocKind::kVmmMapping;
      a.device = d->physical[m->second.handle].device;
      d->allocations[a.base] = a;
    } else {
      d->allocations.erase(m->first);
    }
  }
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT(d);
  ApiGate gate;
  std::vector<std::pair<uint32_t, size_t>> uncharge;
  {
    std::lock_guard<std::mutex> g(d->mu);
    auto it = d->vmm_mappings.find(ptr);
    if (it == d->vmm_mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t end = ptr + size;
    while (it != d->vmm_mappings.end() && it->first < end) {
      mmap(reinterpret_cast<void*>(it->first), it->second.size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      d->allocations.erase(it->first);
      unsigned long long h = it->second.handle;
      --d->physical[h].mappings;
      it = d->vmm_mappings.erase(it);
      uint32_t dev = 0;
      size_t n = MaybeFreePhysicalLocked(d, h, &dev);
      if (n > 0) uncharge.push_back({dev, n});
    }
  }
  for (auto& [dev, n] : uncharge) d->node->Uncharge(d->slot, dev, n);
  return CUDA_SUCCESS;
}

// ---- arrays ----

namespace {

size_t FormatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

CUresult ArrayBytes(size_t w, size_t h, size_t depth, CUarray_format f, unsigned channels,
                    size_t* out) {
  size_t fb = FormatBytes(f);
  if (w == 0 || fb == 0 || (channels != 1 && channels != 2 && channels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = w * (h == 0 ? 1 : h) * (depth == 0 ? 1 : depth) * fb * channels;
  return CUDA_SUCCESS;
}

CUresult CreateArrayMemory(size_t bytes, uintptr_t* base) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  ApiGate gate;
  CUdeviceptr p;
  CUresult r = AllocateDevice(d, ctx, bytes, AllocKind::kArray, nullptr, ctx->device, &p);
  if (r == CUDA_SUCCESS) *base = p;
  return r;
}

CUresult DestroyArrayMemory(uintptr_t base) {
  REQUIRE_INIT(d);
  size_t n = 0;
  uint32_t dev = 0;
  {
    std::lock_guard<std::mutex> g(d->mu);
    auto it = d->allocations.find(base);
    if (it != d->allocations.end() && it->second.kind == AllocKind::kArray) {
      dev = it->second.device;
      n = ReleaseLocked(d, it);
    }
  }
  if (n > 0) d->node->Uncharge(d->slot, dev, n);
  return CUDA_SUCCESS;
}

}  // namespace

GSLICE_SIM_EXPORT CUresult cuArrayCreate_v2(CUarray* ph, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (ph == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes;
  CUresult r = ArrayBytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, &bytes);
  if (r != CUDA_SUCCESS) return r;
  auto a = std::make_unique<CUarray_st>();
  r = CreateArrayMemory(bytes, &a->base);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(g_arrays_mu);
  *ph = a.get();
  g_arrays[a.get()] = std::move(a);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuArray3DCreate_v2(CUarray* ph, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (ph == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes;
  CUresult r = ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels,
                          &bytes);
  if (r != CUDA_SUCCESS) return r;
  auto a = std::make_unique<CUarray_st>();
  r = CreateArrayMemory(bytes, &a->base);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(g_arrays_mu);
  *ph = a.get();
  g_arrays[a.get()] = std::move(a);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuArrayDestroy(CUarray h) {
  REQUIRE_INIT(d);
  std::unique_ptr<CUarray_st> a;
  {
    std::lock_guard<std::mutex> g(g_arrays_mu);
    auto it = g_arrays.find(h);
    if (it == g_arrays.end()) return CUDA_ERROR_INVALID_HANDLE;
    a = std::move(it->second);
    g_arrays.erase(it);
  }
  return DestroyArrayMemory(a->base);
}

GSLICE_SIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* ph,
                                                  const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                  unsigned int levels) {
  if (ph == nullptr || desc == nullptr || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t total = 0;
  for (unsigned l = 0; l < levels; ++l) {
    auto dim = [l](size_t v) -> size_t { return v == 0 ? 0 : ((v >> l) == 0 ? 1 : v >> l); };
    size_t bytes;
    CUresult r = ArrayBytes(dim(desc->Width), dim(desc->Height), dim(desc->Depth), desc->Format,
                            desc->NumChannels, &bytes);
    if (r != CUDA_SUCCESS) return r;
    total += bytes;
  }
  auto a = std::make_unique<CUmipmappedArray_st>();
  CUresult r = CreateArrayMemory(total, &a->base);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(g_arrays_mu);
  *ph = a.get();
  g_mipmapped[a.get()] = std::move(a);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
  REQUIRE_INIT(d);
  std::unique_ptr<CUmipmappedArray_st> a;
  {
    std::lock_guard<std::mutex> g(g_arrays_mu);
    auto it = g_mipmapped.find(h);
    if (it == g_mipmapped.end()) return CUDA_ERROR_INVALID_HANDLE;
    a = std::move(it->second);
    g_mipmapped.erase(it);
  }
  return DestroyArrayMemory(a->base);
}

// ---- pointer attributes ----

GSLICE_SIM_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                                 CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(d->mu);
  const Allocation* a = FindAllocationLocked(d, ptr, 0);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool host = a->kind == AllocKind::kHost || a->kind == AllocKind::kHostRegistered;
  int ordinal = 0;
  for (size_t i = 0; i < d->visible.size(); ++i) {
    if (d->visible[i] == a->device) ordinal = static_cast<int>(i);
  }
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = a->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host && a->kind != AllocKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = a->kind == AllocKind::kManaged ? 1 : 0;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = ordinal; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

// Every attribute asked for; a default (zero) where the pointer is no CUDA pointer or the
// attribute does not apply (the driver's contract: no error for unknown pointers).
GSLICE_SIM_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                                  CUdeviceptr ptr) {
  if (count == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  for (unsigned int i = 0; i < count; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const CUresult r = cuPointerGetAttribute(data[i], attributes[i], ptr);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      const bool wide = attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
                        attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                        attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
                        attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                        attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE;
      std::memset(data[i], 0, wide ? sizeof(uint64_t) : sizeof(unsigned int));
    } else if (r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}
