// Page-locked host memory of the client.
//
// With a worker on the same host (the connection on shared-memory rings), cuMemHostAlloc
// shares its memory with the worker: a memfd sealed against shrinking and growing, mapped
// here, passed to the worker, which maps it - at the same address when it is free there (else
// this side moves to the worker's address when that is free here) - and registers it with its
// driver (remote/server/shared_host.h). Then, as with local page-locked memory: copies from and
// to it move no bytes through the connection and asynchronous ones stay asynchronous (calls.def:
// hostin/hostout), and its device pointer (cuMemHostGetDevicePointer, the attribute) reaches
// it from kernels and memsets (zero-copy). A forked child inherits the mapping as shared
// memory, but not its sharing with a worker: its copies carry the bytes.
//
// Otherwise (another host, GSLICE_REMOTE_SHM=off, or the worker refused) cuMemHostAlloc maps
// anonymous pages here; and cuMemHostRegister always just records a range: copies from and to
// them travel like any host memory (their data in the message), and what needs the memory on
// the GPU's machine - a device pointer to it - is refused with a log line. Pointer attributes
// of the client's page-locked memory are answered here, of any other pointer by the worker (or
// from its earlier answer that the pointer is not CUDA memory: pointer_answers.h). Making or
// registering page-locked memory forgets those answers, though the client's own ranges are
// looked at first.
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "call_stats.h"
#include "client_calls.h"
#include "context_stack.h"
#include "host_memory.h"
#include "log.h"
#include "pointer_answers.h"
#include "sizes.h"
#include "transport.h"

namespace gslice::remote {
namespace {

struct HostRange {
  uintptr_t base;
  size_t size;
  unsigned flags;
  bool allocated;  // cuMemHostAlloc (else cuMemHostRegister)
  // Shared with the worker of process `sharer` (0: not shared): mapped there at `worker`,
  // `device` its device pointer (0: none). `mapped` bytes are mapped (whole pages).
  pid_t sharer = 0;
  uint64_t worker = 0;
  uint64_t device = 0;
  size_t mapped = 0;
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<HostRange>* g_ranges = nullptr;  // REQUIRES g_mu; never freed (calls during exit)
// How many ranges there are, read without the lock: most copies and pointer queries of a
// program that holds no page-locked memory take no lock. A range is added before its
// pointer is handed out, so a call about it sees it counted.
std::atomic<size_t> g_range_count{0};

// Passes fd (a sealed memfd of bytes, mapped here at client_addr) to the worker, which maps
// and registers it (wire.h: kOpHostShare): *worker_addr is where it is mapped there,
// *device_ptr its device pointer.
CUresult ShareWithWorker(int fd, uint64_t client_addr, uint64_t bytes, uint64_t* worker_addr, uint64_t* device_ptr) {
  if (!WorkerSharesMemory()) return CUDA_ERROR_NOT_SUPPORTED;
  Writer request;
  EncodeRequestPrefix(RequestPrefix{.context = reinterpret_cast<uintptr_t>(CurrentContext()), .lane = Lane()},
                      &request);
  request.Put<uint64_t>(client_addr);
  request.Put<uint64_t>(bytes);
  std::vector<uint8_t> reply;
  if (const CUresult r = Exchange(kOpHostShare, request, &reply, fd); r != CUDA_SUCCESS) return r;
  Reader in(reply.data(), reply.size());
  int32_t result = 0;
  if (!in.Get(&result)) return Fail(kLostResult, "the server's answer to sharing page-locked memory is malformed");
  if (result != CUDA_SUCCESS) return static_cast<CUresult>(result);
  if (!in.Get(worker_addr) || !in.Get(device_ptr) || !in.AtEnd()) {
    return Fail(kLostResult, "the server's answer to sharing page-locked memory is malformed");
  }
  return CUDA_SUCCESS;
}

// The worker unregisters and unmaps what it mapped at worker_addr.
CUresult UnshareWithWorker(uint64_t worker_addr) {
  if (!WorkerSharesMemory()) return CUDA_ERROR_NOT_SUPPORTED;
  Writer request;
  EncodeRequestPrefix(RequestPrefix{.context = reinterpret_cast<uintptr_t>(CurrentContext()), .lane = Lane()},
                      &request);
  request.Put<uint64_t>(worker_addr);
  std::vector<uint8_t> reply;
  if (const CUresult r = Exchange(kOpHostUnshare, request, &reply); r != CUDA_SUCCESS) return r;
  Reader in(reply.data(), reply.size());
  int32_t result = 0;
  if (!in.Get(&result) || !in.AtEnd()) {
    return Fail(kLostResult, "the server's answer to unsharing page-locked memory is malformed");
  }
  return static_cast<CUresult>(result);
}

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
  g_range_count.store(g_ranges->size(), std::memory_order_release);
}

void EraseLocked(HostRange* r) {
  *r = g_ranges->back();
  g_ranges->pop_back();
  g_range_count.store(g_ranges->size(), std::memory_order_release);
}

// The client's page-locked range that holds p, if any.
bool FindContaining(uintptr_t p, HostRange* out) {
  if (g_range_count.load(std::memory_order_acquire) == 0) return false;
  pthread_mutex_lock(&g_mu);
  bool found = false;
  if (g_ranges != nullptr) {
    for (const HostRange& r : *g_ranges) {
      if (p >= r.base && p - r.base < r.size) {
        *out = r;
        found = true;
        break;
      }
    }
  }
  pthread_mutex_unlock(&g_mu);
  return found;
}

// Whether r is shared with this process's worker and has a device pointer there.
bool Mapped(const HostRange& r) { return r.sharer == getpid() && r.device != 0; }

// An attribute of the client's page-locked memory: host memory, with a device address when it
// is shared with the worker.
void HostAttribute(const HostRange& r, CUpointer_attribute attribute, CUdeviceptr ptr, void* data, uint64_t size) {
  memset(data, 0, size);
  uint64_t value = 0;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: value = Mapped(r) ? r.device + (ptr - r.base) : 0; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: value = Mapped(r) ? 1 : 0; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: value = CU_MEMORYTYPE_HOST; break;
    case CU_POINTER_ATTRIBUTE_CONTEXT: value = reinterpret_cast<uintptr_t>(CurrentContext()); break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: value = ptr; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: value = r.base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: value = r.size; break;
    default: return;  // zero: no device pointer, not managed, device 0, not mapped
  }
  if (size == sizeof(unsigned int)) {
    const unsigned int narrow = static_cast<unsigned int>(value);
    memcpy(data, &narrow, sizeof narrow);
  } else if (size >= sizeof value) {
    memcpy(data, &value, sizeof value);
  }
}

}  // namespace

bool RemoteAnswerHostPointer(CUresult* result, void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  HostRange range;
  if (!FindContaining(static_cast<uintptr_t>(ptr), &range)) return false;
  const uint64_t size = PointerAttributeSize(attribute);
  if (data == nullptr || size > kMaxBuffer || (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER && !Mapped(range))) {
    *result = CUDA_ERROR_INVALID_VALUE;  // as the driver for what does not apply (no device address)
    return true;
  }
  HostAttribute(range, attribute, ptr, data, size);
  *result = CUDA_SUCCESS;
  return true;
}

HostMemory LookUpHostMemory(const void* p, uint64_t bytes, uint64_t* worker) {
  HostRange r;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  if (p == nullptr || !FindContaining(at, &r)) return HostMemory::kOther;
  const uint64_t offset = at - r.base;
  if (bytes > r.size - offset) return HostMemory::kOther;  // runs past the range
  if (r.sharer != getpid()) return HostMemory::kPageLocked;
  *worker = r.worker + offset;
  return HostMemory::kShared;
}

namespace {

// cuMemHostAlloc's memory shared with the worker (see the top): false, with nothing left
// mapped, when it cannot be (the caller maps private memory instead).
bool AllocateShared(size_t bytesize, HostRange* out) {
  if (!WorkerSharesMemory()) return false;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytesize + page - 1) / page * page;
  if (mapped < bytesize) return false;
  const int fd = memfd_create("gslice-page-locked", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return false;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(mapped)) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
    p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    close(fd);
    return false;
  }
  uint64_t worker = 0, device = 0;
  const CUresult shared = ShareWithWorker(fd, reinterpret_cast<uintptr_t>(p), mapped, &worker, &device);
  if (shared != CUDA_SUCCESS) {
    close(fd);
    munmap(p, mapped);
    static std::atomic<bool> reported{false};
    if (!reported.exchange(true, std::memory_order_relaxed)) {
      gslice::shim::InitLog();
      gslice::shim::Log(gslice::shim::LogLevel::kWarn,
                        "remote: page-locked memory is not shared with the worker (%d): its copies carry their "
                        "bytes and it has no device pointer",
                        static_cast<int>(shared));
    }
    return false;
  }
  if (worker != reinterpret_cast<uintptr_t>(p)) {
    // The worker could not map it at this address: this side moves to the worker's, so that
    // a host pointer means the same memory on both sides, when that address is free here.
    void* moved = mmap(reinterpret_cast<void*>(worker), mapped, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (moved == reinterpret_cast<void*>(worker)) {
      munmap(p, mapped);
      p = moved;
    } else if (moved != MAP_FAILED) {
      munmap(moved, mapped);
    }
  }
  close(fd);
  *out = HostRange{.base = reinterpret_cast<uintptr_t>(p), .size = bytesize, .flags = 0, .allocated = true,
                   .sharer = getpid(), .worker = worker, .device = device, .mapped = mapped};
  return true;
}

}  // namespace

}  // namespace gslice::remote

using namespace gslice::remote;

extern "C" CUresult gslice_remote_call_cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytesize == 0 || (Flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  HostRange range;
  if (AllocateShared(bytesize, &range)) {
    range.flags = Flags;
  } else {
    void* p = mmap(nullptr, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    range = HostRange{.base = reinterpret_cast<uintptr_t>(p), .size = bytesize, .flags = Flags, .allocated = true,
                      .mapped = bytesize};
  }
  pthread_mutex_lock(&g_mu);
  AddLocked(range);
  pthread_mutex_unlock(&g_mu);
  ForgetNotCudaMemory();
  *pp = reinterpret_cast<void*>(range.base);
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return gslice_remote_call_cuMemHostAlloc(pp, bytesize, 0);
}

extern "C" CUresult gslice_remote_call_cuMemFreeHost(void* p) {
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&g_mu);
  HostRange* r = FindLocked(reinterpret_cast<uintptr_t>(p));
  HostRange freed{};
  const bool found = r != nullptr && r->allocated;
  if (found) {
    freed = *r;
    EraseLocked(r);
  }
  pthread_mutex_unlock(&g_mu);
  if (!found) return CUDA_ERROR_INVALID_VALUE;
  // The worker lets go of its mapping first (its driver waits for copies that use it).
  const CUresult unshared = freed.sharer == getpid() ? UnshareWithWorker(freed.worker) : CUDA_SUCCESS;
  munmap(p, freed.mapped);
  return unshared == kLostResult || unshared == kNoServerResult ? unshared : CUDA_SUCCESS;
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
  if (overlaps) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  ForgetNotCudaMemory();
  return CUDA_SUCCESS;
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

// As the driver: every attribute asked for, each a default (zero) where the pointer is no CUDA
// pointer or the attribute does not apply to it. The client's own page-locked memory is answered
// here, and so is a pointer the worker said is not CUDA memory (pointer_answers.h); else one
// round trip per attribute, until the memory type says the pointer is not CUDA memory.
extern "C" CUresult gslice_remote_call_cuPointerGetAttributes(unsigned int numAttributes,
                                                            CUpointer_attribute* attributes, void** data,
                                                            CUdeviceptr ptr) {
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (PointerAttributeSize(attributes[i]) > kMaxBuffer) {
      gslice::shim::InitLog();
      gslice::shim::Log(gslice::shim::LogLevel::kWarn,
                        "remote: cuPointerGetAttributes: attribute %d is not forwarded (yet): CUDA_ERROR_NOT_SUPPORTED",
                        static_cast<int>(attributes[i]));
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  HostRange host;
  const bool is_host = FindContaining(static_cast<uintptr_t>(ptr), &host);
  bool not_cuda = !is_host && KnownNotCudaMemory(ptr);
  if (not_cuda) CountCall(kCachedCall, kOp_cuPointerGetAttributes);
  for (unsigned int i = 0; i < numAttributes; ++i) {
    const uint64_t size = PointerAttributeSize(attributes[i]);
    if (is_host) {
      HostAttribute(host, attributes[i], ptr, data[i], size);
      continue;
    }
    if (not_cuda) {
      memset(data[i], 0, size);
      continue;
    }
    const CUresult r = gslice_remote_call_cuPointerGetAttribute(data[i], attributes[i], ptr);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      memset(data[i], 0, size);  // not a CUDA pointer, or an attribute it lacks
      // No memory type: not a CUDA pointer, and every attribute after this one its default.
      not_cuda = attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    } else if (r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

// Zero-copy access to host memory needs that memory on the GPU's machine: memory shared with
// the worker has its device pointer there.
extern "C" CUresult gslice_remote_call_cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CurrentContext() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  HostRange r;
  if (!FindContaining(reinterpret_cast<uintptr_t>(p), &r)) return CUDA_ERROR_INVALID_VALUE;
  if (Mapped(r)) {
    *pdptr = r.device + (reinterpret_cast<uintptr_t>(p) - r.base);
    return CUDA_SUCCESS;
  }
  static std::atomic<bool> reported{false};
  if (!reported.exchange(true, std::memory_order_relaxed)) {
    gslice::shim::InitLog();
    gslice::shim::Log(gslice::shim::LogLevel::kWarn,
                      "remote: cuMemHostGetDevicePointer: page-locked memory of this machine cannot be mapped into "
                      "the remote GPU's address space (no zero-copy access; memory from cuMemHostAlloc can be when "
                      "the server is on this host, over a unix: address): CUDA_ERROR_NOT_SUPPORTED");
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}
