// Process-local state of the simulated CUDA driver: contexts, streams, events, modules,
// allocations. The handle types of cuda.h (CUcontext = CUctx_st*, ...) are defined here as
// the objects themselves. Node-wide facts (devices, capacity, the device scheduler) live
// in the shared node (../node.h).
//
// Locking: Driver::mu guards the registries (contexts, allocations, pools, modules, VMM).
// A stream's queue has its own mutex; a context's engine its own. Never call into the
// node or block on a stream while holding Driver::mu.
#pragma once

#include <cuda.h>

#include "sim_activity.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../node.h"

#define GSLICE_SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace gslice::sim {

inline constexpr int kDriverVersion = 13000;
inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -5;
inline constexpr size_t kVmmGranularity = 2ull << 20;
// Device allocations are charged in whole pages of this size.
inline constexpr size_t kChargeGranule = 4096;

enum class AllocKind { kDevice, kManaged, kPool, kHost, kHostRegistered, kVmmMapping, kArray };

struct MemPool;

struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;        // bytes the caller asked for (mapping may be larger)
  size_t mapped = 0;      // bytes mmapped at base (0 for registered host memory)
  size_t charged = 0;     // device bytes charged to this process
  uint32_t device = 0;    // physical device index
  CUctx_st* ctx = nullptr;
  AllocKind kind = AllocKind::kDevice;
  MemPool* pool = nullptr;
};

}  // namespace gslice::sim

using gslice::sim::Allocation;

struct CUstream_st;
struct CUgraph_st;  // sim/cuda/graphs.cc

namespace gslice::sim {

struct Dep {
  std::shared_ptr<CUstream_st> stream;
  uint64_t seq;
};

struct Op {
  std::function<void()> run;
  std::vector<Dep> deps;
};

enum class StreamKind { kLegacy, kPerThread, kUser };

}  // namespace gslice::sim

struct CUstream_st : std::enable_shared_from_this<CUstream_st> {
  CUctx_st* ctx = nullptr;
  std::atomic<int> priority{0};  // set by cuStreamSetAttribute while kernels are launched
  unsigned flags = 0;
  gslice::sim::StreamKind kind = gslice::sim::StreamKind::kUser;
  unsigned long long id = 0;
  // The graph that stream capture records this stream's work into; null when not capturing.
  // REQUIRES ctx->m (Enqueue records under it).
  std::shared_ptr<CUgraph_st> capture;

  // Appends op; returns its sequence number (1-based). Starts the worker on first use.
  uint64_t Submit(gslice::sim::Op op);
  uint64_t submitted();
  bool Done(uint64_t seq) const { return completed.load(std::memory_order_acquire) >= seq; }
  void WaitFor(uint64_t seq);
  // Lets the worker finish what is queued, then exit.
  void Retire();

  std::mutex m;
  std::condition_variable cv;
  std::deque<gslice::sim::Op> queue;
  uint64_t next_seq = 0;
  std::atomic<uint64_t> completed{0};
  bool worker_started = false;
  bool retiring = false;

 private:
  void WorkerLoop();
};

struct CUevent_st {
  unsigned flags = 0;
  CUctx_st* ctx = nullptr;
  std::mutex m;
  std::shared_ptr<CUstream_st> stream;  // of the last record, null when never recorded
  uint64_t seq = 0;
  uint64_t generation = 0;
  uint64_t time_ns = 0;  // set when the recorded point is reached
};

struct CUctx_st {
  uint32_t ordinal = 0;  // device ordinal in this process
  uint32_t device = 0;   // physical device in the node
  unsigned flags = 0;
  bool primary = false;
  int primary_refs = 0;
  uint32_t serial = 0;
  unsigned long long id = 0;
  std::atomic<bool> live{false};
  std::atomic<int> sticky_error{CUDA_SUCCESS};
  // Under MPS, the share of the device's SMs its kernels may use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
  // when the context was made): a kernel of this context takes 100 / sm_percent times as long.
  uint32_t sm_percent = 100;

  std::mutex m;  // guards streams, per_thread, limits and cache_config
  std::shared_ptr<CUstream_st> legacy;
  // cuCtxSetLimit's values (stored, not enforced) and cuCtxSetCacheConfig's preference.
  size_t limits[CU_LIMIT_MAX] = {1024, 1u << 20, 8u << 20, 2, 2048, 64, 0, 0, 0};
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  std::map<std::thread::id, std::shared_ptr<CUstream_st>> per_thread;
  std::vector<std::shared_ptr<CUstream_st>> streams;  // user streams

  // Engine: one stream of this context runs a kernel chunk at a time, highest priority
  // first; the context holds the node's device while it has kernels to run.
  std::mutex engine_m;
  std::condition_variable engine_cv;
  bool engine_busy = false;
  bool holds_device = false;
  uint64_t slice_start_ns = 0;
  uint64_t engine_ticket = 0;
  std::set<std::pair<int, uint64_t>> engine_waiting;
};

struct CUmod_st;

struct CUfunc_st {
  // kForeign: a kernel of a fatbin library, which the sim holds but cannot run.
  enum class Behaviour { kBusy, kFill, kForeign };
  CUmod_st* module = nullptr;
  std::string name;
  Behaviour behaviour = Behaviour::kBusy;
  // What cuFuncSetAttribute set (cuFuncGetAttribute answers it, as the driver does).
  std::atomic<int> max_dynamic_shared{49152};
  std::atomic<int> carveout{-1};
};

struct CUmod_st {
  CUctx_st* ctx = nullptr;
  std::vector<std::unique_ptr<CUfunc_st>> functions;
  bool foreign = false;  // a fatbin library: any kernel name is found, none runs
  // A fatbin library's globals, made (zeroed, kForeignGlobalBytes each) when first asked for:
  // the sim does not read their sizes from the fatbin.
  std::vector<std::pair<std::string, CUdeviceptr>> globals;
};

struct CUarray_st {
  uintptr_t base = 0;
};

struct CUmipmappedArray_st {
  uintptr_t base = 0;
};

struct CUmemPoolHandle_st;

namespace gslice::sim {

struct MemPool {
  uint32_t device = 0;  // physical
  uint32_t ordinal = 0;
  bool is_default = false;
  uint64_t release_threshold = 0;
  uint64_t used_current = 0, used_high = 0;
  uint64_t reserved_current = 0, reserved_high = 0;
  // Freed blocks kept for reuse (still charged): size -> bases.
  std::multimap<size_t, uintptr_t> cached;
};

struct PhysicalAllocation {
  int fd = -1;
  size_t size = 0;
  uint32_t device = 0;
  int mappings = 0;
  bool released = false;
  size_t charged = 0;
};

struct Reservation {
  size_t size = 0;
};

struct VmmMapping {
  size_t size = 0;
  unsigned long long handle = 0;
  bool accessible = false;
};

// The process's driver. Created by cuInit, never destroyed.
struct Driver {
  Node node_storage;
  Node* node = &node_storage;
  int slot = -1;
  std::vector<uint32_t> visible;  // ordinal -> physical device

  std::mutex mu;
  std::set<CUctx_st*> contexts;
  std::vector<CUctx_st*> primary;  // per ordinal, created on first retain
  std::map<uintptr_t, Allocation> allocations;
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  std::set<MemPool*> pools;
  std::vector<MemPool*> default_pool;  // per ordinal
  std::vector<MemPool*> current_pool;  // per ordinal
  std::map<unsigned long long, PhysicalAllocation> physical;
  unsigned long long next_physical = 1;
  std::map<uintptr_t, Reservation> reservations;
  std::map<uintptr_t, VmmMapping> vmm_mappings;
  uint32_t next_serial = 1;
  std::atomic<unsigned long long> next_stream_id{1};
  // Destroyed contexts: kept, as stale handles may still be presented to us.
  std::vector<std::unique_ptr<CUctx_st>> retired_contexts;

  // Checkpoint gate: API calls that change device state wait while the process is locked.
  std::mutex gate_m;
  std::condition_variable gate_cv;
  bool locked = false;
  int in_flight = 0;
  bool checkpointed = false;
};

// Returns the driver, or nullptr before a successful cuInit.
Driver* GetDriver();
CUresult InitResult();

// Current context of the calling thread (nullptr when none).
CUctx_st* CurrentContext();
// Validates ctx is a live context of this process.
bool ContextLive(CUctx_st* ctx);

// Resolves a stream handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a created stream);
// per_thread_default selects what 0 means (the _ptsz/_ptds entry points).
CUresult ResolveStream(CUstream h, bool per_thread_default, std::shared_ptr<CUstream_st>* out);
// Records run into graph instead of running it (stream capture; sim/cuda/graphs.cc).
// REQUIRES the capturing stream's ctx->m.
void CaptureOp(CUgraph_st* graph, std::function<void()> run);

// The checks cuLaunchKernel makes of the function and its dimensions (grid x, y, z, block x,
// y, z, shared memory bytes), before it looks at the stream.
CUresult CheckLaunch(CUfunction f, const unsigned dims[7]);
// The work one launch of f runs on target's device (a kernel node's: sim/cuda/graphs.cc), after
// the checks cuLaunchKernel makes of its arguments. REQUIRES an initialised driver and
// CheckLaunch(f, ...) passed.
CUresult MakeKernelWork(CUctx_st* target, CUfunction f, void** params, void** extra, int priority,
                        unsigned long long stream_id, std::function<void()>* work);

// Enqueues run on stream s with the legacy-stream ordering rules applied; while s captures,
// records run into its graph instead and returns the last sequence number submitted.
uint64_t Enqueue(const std::shared_ptr<CUstream_st>& s, std::function<void()> run,
                 std::vector<Dep> extra_deps = {});
// Waits for everything queued so far in ctx.
void SynchronizeContext(CUctx_st* ctx);
// Frees every resource of ctx (allocations, streams, modules). REQUIRES: ctx drained.
void DestroyContextResources(CUctx_st* ctx);

// Runs a kernel of the given length on ctx's device under the node's time-slicing, then
// `body` (may be null) while holding the device. Accounts busy time. Returns when the kernel
// started on the device (MonotonicNs of its first chunk).
uint64_t RunOnDevice(CUctx_st* ctx, int priority, uint64_t duration_ns,
                     const std::function<void()>& body);


// Finds the device-accessible allocation holding [p, p+n); nullptr when none.
// REQUIRES: Driver::mu held.
const Allocation* FindAllocationLocked(Driver* d, uintptr_t p, size_t n);
bool DeviceRangeValid(uintptr_t p, size_t n);

// Checkpoint gate (see Driver::locked).
class ApiGate {
 public:
  ApiGate();
  ~ApiGate();
  ApiGate(const ApiGate&) = delete;
  ApiGate& operator=(const ApiGate&) = delete;

 private:
  Driver* driver_;
};

// Starts the thread that serves checkpoint requests for this process.
void StartCheckpointService(Driver* d);
// Trims every pool's cached blocks down to its release threshold (at sync points).
void TrimPoolsToThreshold();

void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// In a child of fork(): the registries' locks may have been held by threads that do not
// exist in the child; these give each file's locks back fresh.
void ResetKernelLocksAfterFork();
void ResetMemoryLocksAfterFork();

}  // namespace gslice::sim

// Entry-point preludes: the driver's checks, in the driver's order.
#define REQUIRE_INIT(d)                     \
  [[maybe_unused]] Driver* d = GetDriver(); \
  if (d == nullptr) return InitResult()

#define REQUIRE_CONTEXT(ctx)                           \
  CUctx_st* ctx = CurrentContext();                    \
  if (ctx == nullptr || !ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT

#define REQUIRE_DEVICE(d, dev) \
  if ((dev) < 0 || (dev) >= static_cast<int>((d)->visible.size())) return CUDA_ERROR_INVALID_DEVICE
