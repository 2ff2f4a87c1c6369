// Hooks that exist for suspend/resume (resume_gate.h): the calls through which a program makes
// GPU progress or waits for it - synchronisation, copies, memsets, event record/wait, capture
// queries - besides the launches and allocations that other hooks already cover. Every export
// already waits at the gate in its trampoline; these also count as activity, so that a
// process that only copies or synchronises is not taken for idle (queries do not count:
// polling is not use), and check the gate again after counting. Listed in
// interpose/hooks.def; each forwards unchanged.
#pragma once

#include <cuda.h>

namespace gslice::shim {
// Called with the shim's table of real driver functions once cuInit succeeded.
void StartResumeHooks(void* const* real);
}  // namespace gslice::shim

#define GSLICE_RESUME_HOOK extern "C" __attribute__((visibility("hidden")))
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize(CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamSynchronize_ptsz(CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuCtxSynchronize(void);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuCtxSynchronize_v2(CUcontext ctx);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventSynchronize(CUevent e);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventRecord(CUevent e, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventRecord_ptsz(CUevent e, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuEventQuery(CUevent e);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamQuery(CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamQuery_ptsz(CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n,
                                                                  CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                                                  CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s);
GSLICE_RESUME_HOOK CUresult gslice_hook_cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned v, size_t n, CUstream s);
