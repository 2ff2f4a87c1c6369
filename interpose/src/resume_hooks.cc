#include "resume_hooks.h"

#include <atomic>

#include "cuda_exports.h"
#include "launch_hooks.h"
#include "resume_gate.h"

namespace gslice::shim {
namespace {

namespace ex = cuda_exports;
std::atomic<void* const*> g_real{nullptr};

template <typename F>
F Real(int slot) {
  void* const* table = g_real.load(std::memory_order_acquire);
  return table == nullptr ? nullptr : reinterpret_cast<F>(table[slot]);
}

}  // namespace

void StartResumeHooks(void* const* real) { g_real.store(real, std::memory_order_release); }

}  // namespace gslice::shim

using gslice::shim::Real;
namespace ex = gslice::cuda_exports;

// Polling calls (queries) wait like the others but do not count as activity: a framework
// that polls an event is not using the GPU. Before cuInit the real table is not handed
// over yet and the driver would answer NOT_INITIALIZED anyway.
#define GATED_BODY(sym, counts, ...)                                         \
  auto fn = Real<decltype(&gslice_hook_##sym)>(ex::kSlot_##sym);             \
  if (fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                      \
  if (counts) gslice::shim::ResumeGate();                                    \
  else gslice::shim::ResumeGateQuiet();                                      \
  return fn(__VA_ARGS__);

// The _ptsz/_ptds variants: a per-thread default stream in use ends the moving of the
// context's legacy-stream work (launch_hooks.h, NoteStreamUse); s: the stream the call
// names (CU_STREAM_PER_THREAD for the synchronous _ptds copies).
#define PER_THREAD_BODY(sym, s, ...)                                         \
  gslice::shim::NoteStreamUse(s, true, #sym);                                \
  GATED_BODY(sym, true, __VA_ARGS__)

// Synchronising on or querying the legacy stream covers the class stream too
// (launch_hooks.h): the class stream first, then the stream named. counts: as GATED_BODY.
#define BEHIND_BODY(sym, per_thread, counts, s)                                      \
  auto fn = Real<decltype(&gslice_hook_##sym)>(ex::kSlot_##sym);                     \
  if (fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                              \
  if (counts) gslice::shim::ResumeGate();                                            \
  else gslice::shim::ResumeGateQuiet();                                              \
  gslice::shim::NoteStreamUse(s, per_thread, #sym);                                  \
  if (CUstream moved = gslice::shim::ClassStreamBehind(s, per_thread); moved != nullptr) { \
    CUresult r = fn(moved);                                                          \
    if (r != CUDA_SUCCESS) return r;                                                 \
  }                                                                                  \
  return fn(s);

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize(CUstream s) {
  BEHIND_BODY(cuStreamSynchronize, false, true, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize_ptsz(CUstream s) {
  BEHIND_BODY(cuStreamSynchronize_ptsz, true, true, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuCtxSynchronize(void) {
  GATED_BODY(cuCtxSynchronize, true)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuCtxSynchronize_v2(CUcontext ctx) {
  GATED_BODY(cuCtxSynchronize_v2, true, ctx)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventSynchronize(CUevent e) {
  GATED_BODY(cuEventSynchronize, true, e)
}

// Event records, synchronisation and queries on the legacy default stream also cover the
// work moved off it to the class stream (launch_hooks.h, ClassStreamFor); a per-thread
// default stream in use ends that moving (NoteStreamUse).
GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventRecord(CUevent e, CUstream s) {
  s = gslice::shim::ClassStreamFor(s, false, "cuEventRecord");
  GATED_BODY(cuEventRecord, true, e, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventRecord_ptsz(CUevent e, CUstream s) {
  s = gslice::shim::ClassStreamFor(s, true, "cuEventRecord_ptsz");
  GATED_BODY(cuEventRecord_ptsz, true, e, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventQuery(CUevent e) {
  GATED_BODY(cuEventQuery, false, e)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamQuery(CUstream s) {
  BEHIND_BODY(cuStreamQuery, false, false, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamQuery_ptsz(CUstream s) {
  BEHIND_BODY(cuStreamQuery_ptsz, true, false, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  GATED_BODY(cuStreamWaitEvent, true, s, e, flags)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags) {
  PER_THREAD_BODY(cuStreamWaitEvent_ptsz, s, s, e, flags)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  GATED_BODY(cuStreamIsCapturing, true, s, status)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  PER_THREAD_BODY(cuStreamIsCapturing_ptsz, s, s, status)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  GATED_BODY(cuMemcpy, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  PER_THREAD_BODY(cuMemcpy_ptds, CU_STREAM_PER_THREAD, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyAsync, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  PER_THREAD_BODY(cuMemcpyAsync_ptsz, s, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  GATED_BODY(cuMemcpyDtoH_v2, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  PER_THREAD_BODY(cuMemcpyDtoH_v2_ptds, CU_STREAM_PER_THREAD, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  GATED_BODY(cuMemcpyHtoD_v2, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  PER_THREAD_BODY(cuMemcpyHtoD_v2_ptds, CU_STREAM_PER_THREAD, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyDtoHAsync_v2, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  PER_THREAD_BODY(cuMemcpyDtoHAsync_v2_ptsz, s, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyHtoDAsync_v2, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  PER_THREAD_BODY(cuMemcpyHtoDAsync_v2_ptsz, s, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyDtoDAsync_v2, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  PER_THREAD_BODY(cuMemcpyDtoDAsync_v2_ptsz, s, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  GATED_BODY(cuMemsetD8Async, true, dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  PER_THREAD_BODY(cuMemsetD8Async_ptsz, s, dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  GATED_BODY(cuMemsetD32Async, true, dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  PER_THREAD_BODY(cuMemsetD32Async_ptsz, s, dst, v, n, s)
}
