#include "resume_hooks.h"

#include <atomic>

#include "cuda_exports.h"
#include "launch_gate.h"
#include "resume_gate.h"
#include "trace_recorder.h"

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

// The calls a timeline shows (synchronisations, copies, memsets): GATED_BODY, and an "api"
// event with the call's bytes and stream while the process records (trace_recorder.h). Those
// in which the host waits for the GPU (a synchronisation, a synchronous copy: WAITING_BODY)
// also count the call's time as a wait where the launch gate wants it (launch_gate.h,
// CountWait; the MPS controller's critical path, kernel_clock.h), and say the process has
// work queued while they wait where it wants that (WaitsSayQueued). One pair of clock reads
// serves the first two, and neither is read where nothing wants them.
#define TIMED_BODY(sym, call, waits, ...)                                    \
  auto fn = Real<decltype(&gslice_hook_##sym)>(ex::kSlot_##sym);             \
  if (fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                      \
  gslice::shim::ResumeGate();                                                \
  const bool traced = gslice::trace::Recording();                            \
  const bool counted = (waits) && gslice::compute::WaitsCounted();           \
  const bool queued = (waits) && gslice::compute::WaitsSayQueued();          \
  if (!traced && !counted && !queued) return fn(__VA_ARGS__);                \
  if (queued) gslice::compute::WaitBegins();                                 \
  const int64_t called_at = traced || counted ? gslice::trace::NowNs() : 0;  \
  const CUresult result = fn(__VA_ARGS__);                                   \
  const int64_t returned_at = traced || counted ? gslice::trace::NowNs() : 0; \
  if (queued) gslice::compute::WaitEnds();                                   \
  if (traced) gslice::trace::Api(call, called_at, returned_at);              \
  if (counted) gslice::compute::CountWait(returned_at - called_at);          \
  return result;
#define TRACED_BODY(sym, call, ...) TIMED_BODY(sym, call, false, __VA_ARGS__)
#define WAITING_BODY(sym, call, ...) TIMED_BODY(sym, call, true, __VA_ARGS__)

using gslice::trace::PlainCall;
using gslice::trace::StreamCall;
using gslice::trace::ApiKind;

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize(CUstream s) {
  WAITING_BODY(cuStreamSynchronize, StreamCall("cuStreamSynchronize", ApiKind::kSync, s, false), s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize_ptsz(CUstream s) {
  WAITING_BODY(cuStreamSynchronize_ptsz, StreamCall("cuStreamSynchronize_ptsz", ApiKind::kSync, s, true), s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuCtxSynchronize(void) {
  WAITING_BODY(cuCtxSynchronize, PlainCall("cuCtxSynchronize", ApiKind::kSync), )
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuCtxSynchronize_v2(CUcontext ctx) {
  WAITING_BODY(cuCtxSynchronize_v2, PlainCall("cuCtxSynchronize_v2", ApiKind::kSync), ctx)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventSynchronize(CUevent e) {
  WAITING_BODY(cuEventSynchronize, PlainCall("cuEventSynchronize", ApiKind::kSync), e)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventRecord(CUevent e, CUstream s) {
  GATED_BODY(cuEventRecord, true, e, s)

}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventRecord_ptsz(CUevent e, CUstream s) {
  GATED_BODY(cuEventRecord_ptsz, true, e, s)

}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventQuery(CUevent e) {
  GATED_BODY(cuEventQuery, false, e)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamQuery(CUstream s) {
  GATED_BODY(cuStreamQuery, false, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamQuery_ptsz(CUstream s) {
  GATED_BODY(cuStreamQuery_ptsz, false, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  GATED_BODY(cuStreamWaitEvent, true, s, e, flags)

}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags) {
  GATED_BODY(cuStreamWaitEvent_ptsz, true, s, e, flags)

}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  GATED_BODY(cuStreamIsCapturing, true, s, status)

}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  GATED_BODY(cuStreamIsCapturing_ptsz, true, s, status)

}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  WAITING_BODY(cuMemcpy, PlainCall("cuMemcpy", ApiKind::kCopy, n), dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  WAITING_BODY(cuMemcpy_ptds, PlainCall("cuMemcpy_ptds", ApiKind::kCopy, n), dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyAsync, StreamCall("cuMemcpyAsync", ApiKind::kCopy, s, false, n), dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyAsync_ptsz, StreamCall("cuMemcpyAsync_ptsz", ApiKind::kCopy, s, true, n), dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  WAITING_BODY(cuMemcpyDtoH_v2, PlainCall("cuMemcpyDtoH_v2", ApiKind::kCopy, n), dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  WAITING_BODY(cuMemcpyDtoH_v2_ptds, PlainCall("cuMemcpyDtoH_v2_ptds", ApiKind::kCopy, n), dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  WAITING_BODY(cuMemcpyHtoD_v2, PlainCall("cuMemcpyHtoD_v2", ApiKind::kCopy, n), dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  WAITING_BODY(cuMemcpyHtoD_v2_ptds, PlainCall("cuMemcpyHtoD_v2_ptds", ApiKind::kCopy, n), dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyDtoHAsync_v2, StreamCall("cuMemcpyDtoHAsync_v2", ApiKind::kCopy, s, false, n), dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyDtoHAsync_v2_ptsz, StreamCall("cuMemcpyDtoHAsync_v2_ptsz", ApiKind::kCopy, s, true, n),
              dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyHtoDAsync_v2, StreamCall("cuMemcpyHtoDAsync_v2", ApiKind::kCopy, s, false, n), dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyHtoDAsync_v2_ptsz, StreamCall("cuMemcpyHtoDAsync_v2_ptsz", ApiKind::kCopy, s, true, n),
              dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyDtoDAsync_v2, StreamCall("cuMemcpyDtoDAsync_v2", ApiKind::kCopy, s, false, n), dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  TRACED_BODY(cuMemcpyDtoDAsync_v2_ptsz, StreamCall("cuMemcpyDtoDAsync_v2_ptsz", ApiKind::kCopy, s, true, n),
              dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  TRACED_BODY(cuMemsetD8Async, StreamCall("cuMemsetD8Async", ApiKind::kMemset, s, false, n), dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  TRACED_BODY(cuMemsetD8Async_ptsz, StreamCall("cuMemsetD8Async_ptsz", ApiKind::kMemset, s, true, n), dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  TRACED_BODY(cuMemsetD32Async, StreamCall("cuMemsetD32Async", ApiKind::kMemset, s, false, 4 * n), dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  TRACED_BODY(cuMemsetD32Async_ptsz, StreamCall("cuMemsetD32Async_ptsz", ApiKind::kMemset, s, true, 4 * n),
              dst, v, n, s)
}
