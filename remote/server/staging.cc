#include "staging.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "calls.h"
#include "dispatch.h"

namespace gslice::remote {
namespace {

using HostAllocFn = CUresult (*)(void**, size_t, unsigned int);
using FreeHostFn = CUresult (*)(void*);
HostAllocFn g_host_alloc = nullptr;
FreeHostFn g_free_host = nullptr;

struct Block {
  void* p;
  uint64_t size;
};
struct InFlight {
  Block block;
  CUevent event;
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<Block>* g_free = nullptr;         // REQUIRES g_mu
std::vector<InFlight>* g_in_flight = nullptr;  // in the order handed; REQUIRES g_mu
uint64_t g_allocated = 0;                     // bytes of all blocks; REQUIRES g_mu

template <typename Fn>
Fn Driver(uint32_t op) {
  return reinterpret_cast<Fn>(g_driver[op]);
}

uint64_t SizeClass(uint64_t n) {
  uint64_t size = kMinStagingBlock;
  while (size < n) size <<= 1;
  return size;
}

// Moves blocks whose copies completed back to the free list. REQUIRES g_mu.
void ReclaimLocked() {
  auto query = Driver<CUresult (*)(CUevent)>(kOp_cuEventQuery);
  auto destroy = Driver<CUresult (*)(CUevent)>(kOp_cuEventDestroy_v2);
  size_t kept = 0;
  for (InFlight& f : *g_in_flight) {
    if (query(f.event) == CUDA_ERROR_NOT_READY) {
      (*g_in_flight)[kept++] = f;
      continue;
    }
    // Completed (or the event failed: its stream's error is the stream's to report).
    destroy(f.event);
    g_free->push_back(f.block);
  }
  g_in_flight->resize(kept);
}

// A free block of exactly size, or a new one within the bound; {nullptr} when neither.
// REQUIRES g_mu.
Block TakeLocked(uint64_t size) {
  for (size_t i = 0; i < g_free->size(); ++i) {
    if ((*g_free)[i].size == size) {
      const Block b = (*g_free)[i];
      (*g_free)[i] = g_free->back();
      g_free->pop_back();
      return b;
    }
  }
  // Free blocks of other sizes go back to the driver when a new one would pass the bound.
  while (g_allocated + size > kMaxStagingBytes && !g_free->empty()) {
    g_free_host(g_free->back().p);
    g_allocated -= g_free->back().size;
    g_free->pop_back();
  }
  if (g_allocated + size > kMaxStagingBytes) return Block{nullptr, 0};
  void* p = nullptr;
  if (g_host_alloc(&p, size, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return Block{nullptr, 0};
  g_allocated += size;
  return Block{p, size};
}

// A deferred copy (DeferredOut) until it is sent. REQUIRES g_mu for the list.
struct Pending {
  uint8_t* frame;
  uint64_t n;           // payload bytes: the token and the copy's
  uint64_t block_size;  // 0: a buffer of the heap
  CUevent event;        // nullptr: complete
};
std::vector<Pending*>* g_pending = nullptr;  // in the order made; REQUIRES g_mu
std::atomic<uint64_t> g_pending_count{0};

void EnsureListsLocked() {
  if (g_free == nullptr) {
    g_free = new std::vector<Block>();
    g_in_flight = new std::vector<InFlight>();
    g_pending = new std::vector<Pending*>();
  }
}

bool DriverHasEvents() {
  return g_driver[kOp_cuEventQuery] != nullptr && g_driver[kOp_cuEventCreate] != nullptr &&
         g_driver[kOp_cuEventRecord] != nullptr && g_driver[kOp_cuEventRecord_ptsz] != nullptr &&
         g_driver[kOp_cuEventDestroy_v2] != nullptr && g_driver[kOp_cuEventSynchronize] != nullptr;
}

// An event recorded on stream now, or nullptr.
CUevent Mark(CUstream stream, bool per_thread) {
  CUevent event = nullptr;
  auto create = Driver<CUresult (*)(CUevent*, unsigned int)>(kOp_cuEventCreate);
  auto record = Driver<CUresult (*)(CUevent, CUstream)>(per_thread ? kOp_cuEventRecord_ptsz : kOp_cuEventRecord);
  if (create(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  if (record(event, stream) != CUDA_SUCCESS) {
    Driver<CUresult (*)(CUevent)>(kOp_cuEventDestroy_v2)(event);
    return nullptr;
  }
  return event;
}

}  // namespace

void LoadStaging(void* driver) {
  g_host_alloc = reinterpret_cast<HostAllocFn>(dlsym(driver, "cuMemHostAlloc"));
  g_free_host = reinterpret_cast<FreeHostFn>(dlsym(driver, "cuMemFreeHost"));
}

Staged::~Staged() {
  if (block_ == nullptr) return;
  pthread_mutex_lock(&g_mu);
  g_free->push_back(Block{block_, size_});
  pthread_mutex_unlock(&g_mu);
}

bool Staged::Stage(const uint8_t* data, uint64_t n) {
  if (g_host_alloc == nullptr || g_free_host == nullptr || n > kMaxStagingBlock || !DriverHasEvents()) return false;
  const uint64_t size = SizeClass(n);
  pthread_mutex_lock(&g_mu);
  EnsureListsLocked();
  ReclaimLocked();
  Block b = TakeLocked(size);
  // At the bound: wait for the oldest copy in flight, then look again.
  while (b.p == nullptr && !g_in_flight->empty()) {
    const CUevent oldest = g_in_flight->front().event;
    pthread_mutex_unlock(&g_mu);
    Driver<CUresult (*)(CUevent)>(kOp_cuEventSynchronize)(oldest);
    pthread_mutex_lock(&g_mu);
    ReclaimLocked();
    b = TakeLocked(size);
  }
  pthread_mutex_unlock(&g_mu);
  if (b.p == nullptr) return false;
  if (n != 0) std::memcpy(b.p, data, n);
  block_ = b.p;
  size_ = b.size;
  return true;
}

CUresult Staged::HandTo(CUstream stream, bool per_thread, uint32_t sync_op) {
  const CUevent event = Mark(stream, per_thread);
  if (event == nullptr) {
    // No mark on the stream: the block is free once the stream has drained.
    const CUresult r = Driver<CUresult (*)(CUstream)>(sync_op)(stream);
    return r;  // ~Staged returns the block
  }
  pthread_mutex_lock(&g_mu);
  g_in_flight->push_back(InFlight{Block{block_, size_}, event});
  pthread_mutex_unlock(&g_mu);
  block_ = nullptr;
  return CUDA_SUCCESS;
}

// ---- deferred device-to-host copies ------------------------------------------------------

DeferredOut::~DeferredOut() {
  if (frame_ == nullptr) return;
  if (size_ == 0) {
    free(frame_);
    return;
  }
  pthread_mutex_lock(&g_mu);
  g_free->push_back(Block{frame_, size_});
  pthread_mutex_unlock(&g_mu);
}

void* DeferredOut::Prepare(uint64_t n) {
  n_ = n;
  if (g_host_alloc != nullptr && g_free_host != nullptr && n + 8 <= kMaxStagingBlock && DriverHasEvents()) {
    pthread_mutex_lock(&g_mu);
    EnsureListsLocked();
    ReclaimLocked();
    const Block b = TakeLocked(SizeClass(n + 8));
    pthread_mutex_unlock(&g_mu);
    frame_ = static_cast<uint8_t*>(b.p);
    size_ = b.size;
  }
  if (frame_ == nullptr) {
    // Pageable: the driver's copy completes before it returns.
    frame_ = static_cast<uint8_t*>(malloc(n + 8));
    size_ = 0;
  }
  return frame_ != nullptr ? frame_ + 8 : nullptr;
}

CUresult DeferredOut::HandTo(uint64_t token, CUstream stream, bool per_thread, uint32_t sync_op) {
  std::memcpy(frame_, &token, sizeof token);
  CUevent event = DriverHasEvents() ? Mark(stream, per_thread) : nullptr;
  CUresult result = CUDA_SUCCESS;
  if (event == nullptr) result = Driver<CUresult (*)(CUstream)>(sync_op)(stream);
  if (result != CUDA_SUCCESS) return result;  // ~DeferredOut frees the memory
  auto* p = new Pending{.frame = frame_, .n = n_ + 8, .block_size = size_, .event = event};
  pthread_mutex_lock(&g_mu);
  EnsureListsLocked();
  g_pending->push_back(p);
  g_pending_count.fetch_add(1, std::memory_order_relaxed);
  pthread_mutex_unlock(&g_mu);
  frame_ = nullptr;
  return CUDA_SUCCESS;
}

bool AnyDeferred() { return g_pending_count.load(std::memory_order_relaxed) != 0; }

const uint8_t* TakeCompletedDeferred(uint64_t* n, void** owner) {
  auto query = Driver<CUresult (*)(CUevent)>(kOp_cuEventQuery);
  auto destroy = Driver<CUresult (*)(CUevent)>(kOp_cuEventDestroy_v2);
  pthread_mutex_lock(&g_mu);
  Pending* found = nullptr;
  for (size_t i = 0; g_pending != nullptr && i < g_pending->size();) {
    Pending* p = (*g_pending)[i];
    const CUresult state = p->event == nullptr ? CUDA_SUCCESS : query(p->event);
    if (state == CUDA_ERROR_NOT_READY) {
      ++i;
      continue;
    }
    g_pending->erase(g_pending->begin() + static_cast<std::ptrdiff_t>(i));
    g_pending_count.fetch_sub(1, std::memory_order_relaxed);
    if (p->event != nullptr) destroy(p->event);
    p->event = nullptr;
    if (state == CUDA_SUCCESS) {
      found = p;
      break;
    }
    // The copy's stream failed: nothing to send (the stream's error is the client's news).
    if (p->block_size != 0) {
      g_free->push_back(Block{p->frame, p->block_size});
    } else {
      free(p->frame);
    }
    delete p;
  }
  pthread_mutex_unlock(&g_mu);
  if (found == nullptr) return nullptr;
  *n = found->n;
  *owner = found;
  return found->frame;
}

void ReleaseDeferred(void* owner) {
  auto* p = static_cast<Pending*>(owner);
  if (p->block_size != 0) {
    pthread_mutex_lock(&g_mu);
    g_free->push_back(Block{p->frame, p->block_size});
    pthread_mutex_unlock(&g_mu);
  } else {
    free(p->frame);
  }
  delete p;
}

}  // namespace gslice::remote
