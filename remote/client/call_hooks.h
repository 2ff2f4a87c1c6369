// The hooks calls.def names (before=, after=, answered=), which the generated calls run with the
// call's arguments: before= first (true: answered on the client, with *result set), after= once
// the call succeeded, answered= once it came back, failed or not. Each keeps the client's own
// state in step with the driver's: the context stack, the streams and captures seen, the private
// tables' context storage, the kept answers' relations, the kernel-parameter layouts, the events
// made ahead, the attribute sets the driver accepts and the pointers that are not CUDA memory.
#pragma once

#include <cuda.h>

#include "call.h"
#include "context_stack.h"
#include "event_pool.h"
#include "export_tables.h"
#include "host_memory.h"
#include "local_calls.h"
#include "pointer_answers.h"
#include "seen_state.h"

namespace gslice::remote {

template <typename Params>
void RemoteAfterCtxCreate(CUcontext* pctx, Params, unsigned int, CUdevice dev) {
  if (pctx == nullptr) return;
  PushContext(*pctx);
  RememberContextDevice(*pctx, dev, false);
}
inline void RemoteAfterCtxCreate(CUcontext* pctx, unsigned int, CUdevice dev) {
  if (pctx == nullptr) return;
  PushContext(*pctx);
  RememberContextDevice(*pctx, dev, false);
}
inline void RemoteAfterCtxDestroy(CUcontext ctx) {
  ForgetContext(ctx);
  ForgetContextDevice(ctx);
  ReleaseContextStorage(ctx);
}
inline void RemoteAfterPrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return;
  RememberPrimaryContext(dev, *pctx);
  RememberContextDevice(*pctx, dev, true);
}
inline void RemoteAfterPrimaryCtxReset(CUdevice dev) { ReleasePrimaryContextStorage(dev); }

template <typename... Rest>
void RemoteAfterStreamCreate(CUstream* stream, Rest...) {
  if (stream != nullptr) RememberStream(*stream);
}
inline void RemoteAfterStreamDestroy(CUstream stream) { ForgetStream(stream); }
// cuStreamBeginCapture and cuStreamBeginCaptureToGraph: the stream captures from now on.
template <typename... Rest>
void RemoteAfterBeginCapture(CUstream stream, Rest...) {
  RememberCapture(stream);
}
inline bool RemoteBeforeEndCapture(CUresult*, CUstream stream, CUgraph*) {
  ForgetCapture(stream);
  return false;
}

inline void RemoteAfterKernelGetFunction(CUfunction* function, CUkernel kernel) {
  if (function != nullptr) RelateKernelFunction(kernel, *function);
}
inline void RemoteAfterLibraryGetModule(CUmodule* module, CUlibrary) {
  if (module != nullptr) NoteLibraryModule(*module);
}
inline void RemoteAfterModuleGetFunction(CUfunction* function, CUmodule module, const char*) {
  if (function != nullptr) NoteModuleFunction(module, *function);
}
template <typename... Args>
void RemoteForgetKernelLayouts(Args...) {
  ForgetKernelLayouts();
}
// An unloaded module's or library's handles may name other functions from now on.
template <typename Handle>
void RemoteAfterCodeUnloaded(Handle) {
  ForgetKernelLayouts();
  ForgetAcceptedSets();
}
// A context may go (destroyed, released, reset): the events made ahead for it, and what was
// known to hold while it lived (events given out, attribute sets accepted).
inline bool RemoteBeforeContextGoes(CUresult*, CUcontext) {
  ReleaseEventsAhead();
  ForgetAcceptedSets();
  return false;
}
// A device's primary context released or reset: also its device, which the client answered
// for it (the context may go, and its handle name another context later).
inline bool RemoteBeforeContextGoes(CUresult*, CUdevice dev) {
  ReleaseEventsAhead();
  ForgetAcceptedSets();
  ForgetPrimaryContextDevice(dev);
  return false;
}

}  // namespace gslice::remote
