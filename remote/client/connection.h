// The forwarding client's side of a call: one connection per process to gslice-remoted
// (GSLICE_REMOTE; tls:// with the token of GSLICE_REMOTE_TOKEN_FILE), made at the first call
// that needs a GPU (before it, device queries go to a probe connection that holds no slice:
// attach.h), shared by the process's threads, and the per-thread context stack whose top each
// request carries. Each thread's requests carry its lane, which the worker serves on a thread
// of its own: a thread waiting in a synchronisation holds up no other thread's calls. Runs
// inside applications: libc only, no exceptions, never raises a signal.
//
// Failures become CUresults with one log line: no server configured or reachable, or the
// handshake refused -> CUDA_ERROR_NO_DEVICE; the connection lost or a reply that breaks the
// protocol -> CUDA_ERROR_DEVICE_UNAVAILABLE, for this and every later call of every thread
// (never retried silently: the worker and everything it held are gone).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "calls.h"
#include "wire.h"

namespace gslice::remote {

inline constexpr CUresult kNoServerResult = CUDA_ERROR_NO_DEVICE;
inline constexpr CUresult kLostResult = CUDA_ERROR_DEVICE_UNAVAILABLE;

// One exported symbol the client answers and its function (generated table).
struct ClientCall {
  const char* name;
  void* fn;
};

// A request being built and its reply. The connection's locks are held only inside Run().
class Call {
 public:
  // Starts the request with the calling thread's current context.
  explicit Call(uint32_t op);
  Writer& request() { return request_; }
  // One round trip. Returns the driver's result, or a connection failure.
  CUresult Run();
  // The reply after the result (valid after Run returned CUDA_SUCCESS, or for custom calls
  // that read outputs after an error too).
  Reader& reply() { return reader_; }
  // Whether the server answered (the result is the driver's, not a connection failure).
  bool answered() const { return answered_; }
  // The reply does not match the call: the connection is dropped, kLostResult.
  CUresult Malformed();
  // For a call the client keeps answers of (calls.def: cached, cached=GROUP): true, with the
  // reply ready, when it holds this call's answer; nothing is sent either way.
  bool AnsweredFromCache();
  // For an async call (calls.def: async): this one is waited for, and answered with what the
  // driver wrote (a copy into memory the worker cannot reach).
  void WaitForAnswer() { wait_ = true; }
  // The handle this call's answers are indexed by (calls.def: cached=GROUP(PARAM)), or the
  // handle whose answers it drops (drops=GROUP(PARAM)): the parameter's value (HandleBits).
  // Set before Run or AnsweredFromCache; 0 when the call names none.
  void set_cache_handle(uint64_t handle) { cache_handle_ = handle; }

 private:
  // Where a successful answer is kept: its cache slot, key, and the slot's generation when
  // the call was made.
  struct Kept {
    size_t slot = 0;
    uint64_t generation = 0;
    std::string key;
  };
  // Run() without its timeline record (client_trace.h); sets mode_ and seq_.
  CUresult Forward();
  // AnsweredFromCache, leaving in *kept where this call's answer would be kept (its slot, key
  // and the slot's generation at the look).
  bool FromCache(Kept* kept);
  // Reads the result from reply_buffer_ (the answer to this call) and keeps a successful
  // answer as *kept says (nullptr: not kept).
  CUresult Answered(Kept* kept);

  uint32_t op_;
  uint8_t mode_ = 4;  // client_trace.h: CallMode (kFailed until it went)
  uint32_t seq_ = 0;  // the request's frame seq (0: none sent)
  Writer request_;
  std::vector<uint8_t> reply_buffer_;
  Reader reader_;
  bool answered_ = false;
  bool wait_ = false;
  uint64_t cache_handle_ = 0;
};

// Page-locked memory shared with the worker (remote/client/host_memory.cc, wire.h:
// kOpHostShare). Whether this process's worker is on the same host, over shared-memory rings
// (memory can be shared with it then).
bool WorkerSharesMemory();
// Passes fd (a sealed memfd of bytes, mapped here at client_addr) to the worker, which maps
// and registers it: *worker_addr is where it is mapped there, *device_ptr its device pointer.
CUresult ShareWithWorker(int fd, uint64_t client_addr, uint64_t bytes, uint64_t* worker_addr, uint64_t* device_ptr);
// The worker unregisters and unmaps what it mapped at worker_addr.
CUresult UnshareWithWorker(uint64_t worker_addr);
// For calls.def's hostin/hostout: what [p, p + bytes) lies in (host_memory.cc). kShared:
// memory this process shares with its worker, *worker its address there; kPageLocked: the
// client's own page-locked memory, not shared; kOther: anything else (NULL, pageable memory,
// a range that runs past its allocation).
enum class HostMemory { kOther, kShared, kPageLocked };
HostMemory LookUpHostMemory(const void* p, uint64_t bytes, uint64_t* worker);
// Registers where the bytes of a deferred copy go (wire.h: kOpDeferredData) and returns the
// token its request carries. The connection's reader writes them there when they come.
uint64_t ExpectDeferred(void* p, uint64_t bytes);

// A handle parameter's value as the client's kept answers index it.
template <typename T>
uint64_t HandleBits(T value) {
  if constexpr (std::is_pointer_v<T>) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(value));
  } else {
    return static_cast<uint64_t>(value);
  }
}

// One request of the timeline's (wire.h: Trace; op kOpTraceClock or kOpTraceFetch) on the
// worker's connection, on the calling thread's lane; *reply is the answer's payload.
// CUDA_ERROR_NOT_INITIALIZED when this process holds no worker (nothing to ask).
CUresult TraceExchange(uint32_t op, std::vector<uint8_t>* reply);

// The calling thread's context stack (the driver's semantics: cuCtxSetCurrent replaces the
// top, push/pop, a created context is pushed).
CUcontext CurrentContext();
void SetCurrentContext(CUcontext ctx);
bool PushContext(CUcontext ctx);
CUcontext PopContext();
// Removes a destroyed context from the calling thread's stack.
void ForgetContext(CUcontext ctx);

// Refusals on the client, each with a log line naming the call.
CUresult RefuseArgument(const char* call, const char* param);
CUresult RefuseSize(const char* call, const char* param, uint64_t bytes);
CUresult RefuseImage(const char* call);
// A driver function the client does not forward (yet).
CUresult NotForwarded(const char* name);

// The size of a module image: fatbin (and its wrapper), ELF cubin, PTX or other NUL-terminated
// text. 0 when it cannot be told.
uint64_t ImageSize(const void* image);
// The bytes to ship for a module image: the image itself, or the fatbin a fatbin wrapper
// names (the worker's driver loads either alike). nullptr when a wrapper names none.
const void* ImageBytes(const void* image);

// The kernel-parameter layouts cached per function are dropped when modules come and go
// (a new function may reuse a freed handle).
void ForgetKernelLayouts();

// Bookkeeping after calls of calls.def (after=...), called with the call's arguments.
template <typename... Rest>
void RemoteAfterCtxCreate(CUcontext* pctx, Rest...) {
  if (pctx != nullptr) PushContext(*pctx);
}
// The private tables' context-local storage (export_tables.cc): a context's values go with it,
// their destructors run.
void ReleaseContextStorage(CUcontext ctx);
void ReleasePrimaryContextStorage(CUdevice dev);
void RememberPrimaryContext(CUdevice dev, CUcontext ctx);

inline void RemoteAfterCtxDestroy(CUcontext ctx) {
  ForgetContext(ctx);
  ReleaseContextStorage(ctx);
}
inline void RemoteAfterPrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx != nullptr) RememberPrimaryContext(dev, *pctx);
}
inline void RemoteAfterPrimaryCtxReset(CUdevice dev) { ReleasePrimaryContextStorage(dev); }
// cuPointerGetAttribute of the client's own page-locked memory, answered on the client
// (remote/client/host_memory.cc): true with *result set when ptr is such memory.
bool RemoteAnswerHostPointer(CUresult* result, void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
// Streams and captures the client has seen (remote/client/seen_state.cc).
void RememberStream(CUstream stream);
void ForgetStream(CUstream stream);
void RememberCapture(CUstream stream);
void ForgetCapture(CUstream stream);
bool StreamKnownNotCapturing(CUstream stream);
template <typename... Rest>
void RemoteAfterStreamCreate(CUstream* stream, Rest...) {
  if (stream != nullptr) RememberStream(*stream);
}
inline void RemoteAfterStreamDestroy(CUstream stream) { ForgetStream(stream); }
inline void RemoteAfterBeginCapture(CUstream stream, CUstreamCaptureMode) { RememberCapture(stream); }
inline bool RemoteBeforeEndCapture(CUresult*, CUstream stream, CUgraph*) {
  ForgetCapture(stream);
  return false;
}
// cuStreamIsCapturing of a known stream while no capture is under way: NONE, on the client.
bool RemoteAnswerNotCapturing(CUresult* result, CUstream stream, CUstreamCaptureStatus* status);
// Setting a function attribute to the value the client knows it has: nothing to do.
bool RemoteSkipKernelAttributeAsSet(CUresult* result, CUfunction_attribute attrib, int val, CUkernel kernel,
                                    CUdevice dev);
bool RemoteSkipFuncAttributeAsSet(CUresult* result, CUfunction hfunc, CUfunction_attribute attrib, int value);
// Kernels, functions and libraries' modules the client has seen answered: what a set of one
// handle's attribute may change (kept_answers.h: its family).
void RelateKernelFunction(CUkernel kernel, CUfunction function);
void NoteLibraryModule(CUmodule module);
void NoteModuleFunction(CUmodule module, CUfunction function);
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

}  // namespace gslice::remote
