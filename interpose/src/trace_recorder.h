// The timeline recorder (docs/trace.md): off by default; while on, the shim's hooks record the
// driver calls that matter, gate waits, suspensions, NVTX ranges and counters into a bounded
// ring per process, CUPTI adds the GPU's start and end of kernels and copies, and the process
// writes its part (gslice/trace_format.h) when it stops recording.
//
// Two ways to turn it on:
//  - GSLICE_TRACE=<folder> (gslice run --trace): the process records from cuInit to its exit
//    and writes <folder>/<pid>.part at exit.
//  - gsliced's request (gslice trace): the slice's trace_request word in the node ledger
//    (LedgerSlice::trace_request) is set to a request id for N seconds. The process records
//    while it is set and, once it changes, writes <ledger>/trace-<slice>-<id>/<pid>.part.
//
// Cost when off: every hook that records asks On(), one relaxed load of the flag word through a
// pointer fixed at cuInit; nothing else runs. When on: a clock read per recorded call and a
// 64-byte record claimed with one fetch_add; kernel names are interned once per function.
// Nothing here ever fails a driver call or blocks the application: a full ring overwrites its
// oldest records (counted as dropped), and a part that cannot be written is logged and lost.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace gslice::shim {
class SliceAccount;
}

namespace gslice::trace {

namespace detail {
extern std::atomic<const std::atomic<uint32_t>*> g_flag;
extern std::atomic<bool> g_ready;  // the ring exists (Start ran)
bool Start();                      // lazily, on the first recorded call once on
}  // namespace detail

// True while this process records: the one check on the hot path.
inline bool On() {
  return detail::g_flag.load(std::memory_order_relaxed)->load(std::memory_order_relaxed) != 0;
}

// True when On() and the recorder is ready to take records (starting it if needed).
inline bool Recording() {
  if (!On()) return false;
  return detail::g_ready.load(std::memory_order_acquire) || detail::Start();
}

// The recording clock: MonotonicNs (gslice/clock.h), moved by GSLICE_TRACE_CLOCK_SHIFT when a
// test sets it.
int64_t NowNs();

// Called by the cuInit hook once the real driver is up: real is the shim's table of real
// functions (cuda_exports slots), account the process's slice (nullptr without one).
// Reads GSLICE_TRACE and points the flag at the local word (GSLICE_TRACE set) or at the
// slice's trace request word. Idempotent.
void Init(void* const* real, const char* real_driver_path, shim::SliceAccount* account);

// What a driver call did, for its "api" event. REQUIRES: Recording().
enum class ApiKind : uint8_t { kLaunch, kCopy, kMemset, kAlloc, kFree, kSync, kOther };
struct ApiCall {
  const char* name;          // the driver function (static string)
  ApiKind kind;
  CUfunction function = nullptr;  // launches: the kernel
  CUstream stream = nullptr;      // calls on a stream
  bool has_stream = false;
  bool per_thread = false;        // a _ptsz/_ptds variant (stream 0 is the thread's own)
  uint64_t bytes = 0;             // copies, memsets, allocations
};
void Api(const ApiCall& call, int64_t start_ns, int64_t end_ns);

// A call on a stream, and one without.
constexpr ApiCall StreamCall(const char* name, ApiKind kind, CUstream s, bool per_thread, uint64_t bytes = 0) {
  return {.name = name, .kind = kind, .stream = s, .has_stream = true, .per_thread = per_thread, .bytes = bytes};
}
constexpr ApiCall PlainCall(const char* name, ApiKind kind, uint64_t bytes = 0) {
  return {.name = name, .kind = kind, .bytes = bytes};
}

// An "api" event for the enclosing hook's scope, while recording (off: one load and a branch).
class ApiScope {
 public:
  explicit ApiScope(const ApiCall& call) : on_(Recording()) {
    if (on_) {
      call_ = call;
      start_ = NowNs();
    }
  }
  ~ApiScope() {
    if (on_) Api(call_, start_, NowNs());
  }
  ApiScope(const ApiScope&) = delete;
  ApiScope& operator=(const ApiScope&) = delete;

 private:
  bool on_;
  ApiCall call_{};
  int64_t start_ = 0;
};

// Time a launch waited at the compute gate, and time a call waited while the process was
// suspended (call: the waiting function's name, or nullptr). REQUIRES: Recording().
void GateWait(int64_t start_ns, int64_t end_ns);
void Suspended(const char* call, int64_t start_ns, int64_t end_ns);

// NVTX (trace_nvtx.cc) on the calling thread. REQUIRES: Recording().
void NvtxRange(const char* message, int64_t start_ns, int64_t end_ns, uint32_t tid);
void NvtxMark(const char* message, int64_t at_ns);

// GPU activity from CUPTI (trace_cupti.cc).
enum class GpuKind : uint8_t { kKernel, kMemcpy, kMemset };
void Gpu(GpuKind kind, const char* name, uint32_t stream_id, uint32_t device, uint64_t bytes, int64_t start_ns,
         int64_t end_ns);

// CUPTI's own count of records it dropped, added to the part's dropped events.
void CountCuptiDropped(uint64_t n);

// Called by the shim's constructor: NVTX_INJECTION64_PATH names the shim (trace_nvtx.cc)
// unless the user set it, so that the program's NVTX calls reach the recorder. Under
// GSLICE_TRACE it also opens NVTX's early phase: ranges opened before cuInit keep their true
// start, and ranges and marks that end before it wait for EndEarlyNvtx.
void OfferNvtxInjection();

// Called by Init once it decided whether the process records: ends the early phase, handing
// what it kept to the recorder when Recording(), else dropping it. Returns when the early
// phase began (CLOCK_MONOTONIC ns; 0: there was none), the part's true start.
int64_t EndEarlyNvtx();

// This thread's OS id (cached).
uint32_t ThreadId();

// Interns s (copied; at most 1 KiB kept) and returns its id, 0 when the table is full.
uint32_t Intern(const char* s);

}  // namespace gslice::trace
