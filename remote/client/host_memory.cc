// Page-locked host memory on a machine with no GPU: the client's own memory. cuMemHostAlloc
// maps anonymous pages here and cuMemHostRegister records a range; copies from and to them
// travel like any host memory (their data in the message). What the driver would make of
// them on the GPU side - a device pointer to host memory, zero-copy access - is not
// available (cuMemHostGetDevicePointer is not forwarded).
#include <cuda.h>
#include <pthread.h>
#include <sys/mman.h>

#include <cstdint>
#include <vector>

#include "connection.h"

namespace gslice::remote {
namespace {

struct HostRange {
  uintptr_t base;
  size_t size;
  unsigned flags;
  bool allocated;  // cuMemHostAlloc (else cuMemHostRegister)
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<HostRange>* g_ranges = nullptr;  // REQUIRES g_mu; never freed (calls during exit)

HostRange* FindLocked(uintptr_t base) {
  if (g_ranges == nullptr) return nullptr;
  for (HostRange& r : *g_ranges)
    if (r.base == base) return &r;
  return nullptr;
}

bool OverlapsLocked(uintptr_t base, size_t size) {
  if (g_ranges == nullptr) return false;
  for (const HostRange& r : *g_ranges)
    if (base < r.base + r.size && r.base < base + size) return true;
  return false;
}

void AddLocked(const HostRange& r) {
  if (g_ranges == nullptr) g_ranges = new std::vector<HostRange>();
  g_ranges->push_back(r);
}

void EraseLocked(HostRange* r) {
  *r = g_ranges->back();
  g_ranges->pop_back();
}

}  // namespace
}  // namespace gslice::remote

using namespace gslice::remote;

extern "C" CUresult gslice_remote_call_cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytesize == 0 || (Flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_mu);
  AddLocked({reinterpret_cast<uintptr_t>(p), bytesize, Flags, true});
  pthread_mutex_unlock(&g_mu);
  *pp = p;
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return gslice_remote_call_cuMemHostAlloc(pp, bytesize, 0);
}

extern "C" CUresult gslice_remote_call_cuMemFreeHost(void* p) {
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&g_mu);
  HostRange* r = FindLocked(reinterpret_cast<uintptr_t>(p));
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  if (r != nullptr && r->allocated) {
    munmap(p, r->size);
    EraseLocked(r);
    result = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&g_mu);
  return result;
}

extern "C" CUresult gslice_remote_call_cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mu);
  HostRange* r = FindLocked(reinterpret_cast<uintptr_t>(p));
  if (r != nullptr && r->allocated) *pFlags = r->flags;
  pthread_mutex_unlock(&g_mu);
  return r != nullptr && r->allocated ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

extern "C" CUresult gslice_remote_call_cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (p == nullptr || bytesize == 0 || (Flags & ~0xFu) != 0) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  pthread_mutex_lock(&g_mu);
  const bool overlaps = OverlapsLocked(base, bytesize);
  if (!overlaps) AddLocked({base, bytesize, Flags, false});
  pthread_mutex_unlock(&g_mu);
  return overlaps ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuMemHostUnregister(void* p) {
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&g_mu);
  HostRange* r = FindLocked(reinterpret_cast<uintptr_t>(p));
  const bool registered = r != nullptr && !r->allocated;
  if (registered) EraseLocked(r);
  pthread_mutex_unlock(&g_mu);
  return registered ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}
