#include "resume_hooks.h"

#include <atomic>

#include "cuda_exports.h"
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

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize(CUstream s) {
  GATED_BODY(cuStreamSynchronize, true, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize_ptsz(CUstream s) {
  GATED_BODY(cuStreamSynchronize_ptsz, true, s)
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
  GATED_BODY(cuMemcpy, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  GATED_BODY(cuMemcpy_ptds, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyAsync, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyAsync_ptsz, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  GATED_BODY(cuMemcpyDtoH_v2, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  GATED_BODY(cuMemcpyDtoH_v2_ptds, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  GATED_BODY(cuMemcpyHtoD_v2, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  GATED_BODY(cuMemcpyHtoD_v2_ptds, true, dst, src, n)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyDtoHAsync_v2, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyDtoHAsync_v2_ptsz, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyHtoDAsync_v2, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyHtoDAsync_v2_ptsz, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyDtoDAsync_v2, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  GATED_BODY(cuMemcpyDtoDAsync_v2_ptsz, true, dst, src, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  GATED_BODY(cuMemsetD8Async, true, dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  GATED_BODY(cuMemsetD8Async_ptsz, true, dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  GATED_BODY(cuMemsetD32Async, true, dst, v, n, s)
}

GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  GATED_BODY(cuMemsetD32Async_ptsz, true, dst, v, n, s)
}
