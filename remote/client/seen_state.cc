// What the client answers from what it has seen its own program do, without a round trip:
// whether a stream captures while no capture is under way in the process, and setting a
// function attribute to the value the client already knows it has. Frameworks make these
// calls around every launch (cudart asks whether the launch's stream captures; cuDNN sets a
// kernel's dynamic shared memory before each launch).
//
// Streams and captures: every stream the program has comes from this client's cuStreamCreate*
// (or is the NULL, legacy or per-thread stream), and every capture starts with its
// cuStreamBeginCapture; so while no capture is under way, a stream the client knows is not
// capturing (CU_STREAM_CAPTURE_STATUS_NONE), as the driver would answer. Once one is under way
// (another stream may have joined it through an event), and for a stream the client does not
// know (destroyed, or never made: the driver's error belongs to the driver), the worker answers.
#include <cuda.h>
#include <pthread.h>

#include <unordered_set>

#include "call.h"
#include "seen_state.h"

namespace gslice::remote {
namespace {

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
// REQUIRES g_mu. Never freed: calls may come during exit.
std::unordered_set<CUstream>* g_streams = nullptr;    // made by this client, not destroyed
std::unordered_set<CUstream>* g_capturing = nullptr;  // cuStreamBeginCapture'd, not ended

bool Special(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

void Insert(std::unordered_set<CUstream>** set, CUstream s) {
  if (*set == nullptr) *set = new std::unordered_set<CUstream>();
  (*set)->insert(s);
}

}  // namespace

// REQUIRES nothing. True with *result set when the stream is known not to capture.
bool StreamKnownNotCapturing(CUstream stream) {
  pthread_mutex_lock(&g_mu);
  const bool none = (g_capturing == nullptr || g_capturing->empty()) &&
                    (Special(stream) || (g_streams != nullptr && g_streams->count(stream) != 0));
  pthread_mutex_unlock(&g_mu);
  return none;
}

void RememberStream(CUstream stream) {
  pthread_mutex_lock(&g_mu);
  Insert(&g_streams, stream);
  pthread_mutex_unlock(&g_mu);
}

void ForgetStream(CUstream stream) {
  pthread_mutex_lock(&g_mu);
  if (g_streams != nullptr) g_streams->erase(stream);
  if (g_capturing != nullptr) g_capturing->erase(stream);
  pthread_mutex_unlock(&g_mu);
}

void RememberCapture(CUstream stream) {
  pthread_mutex_lock(&g_mu);
  Insert(&g_capturing, stream);
  pthread_mutex_unlock(&g_mu);
}

// The capture ends with cuStreamEndCapture whatever it returns (an invalidated capture ends
// with an error); forgotten before the call: meanwhile other threads' questions go to the
// worker only if another capture is under way, as CUDA orders nothing between them anyway.
void ForgetCapture(CUstream stream) {
  pthread_mutex_lock(&g_mu);
  if (g_capturing != nullptr) g_capturing->erase(stream);
  pthread_mutex_unlock(&g_mu);
}

bool RemoteAnswerNotCapturing(CUresult* result, CUstream stream, CUstreamCaptureStatus* status) {
  if (status == nullptr || !StreamKnownNotCapturing(stream)) return false;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  *result = CUDA_SUCCESS;
  return true;
}

namespace {

// Whether the client's cache holds this attribute's value as val: setting it again changes
// nothing, so the driver would succeed and keep the same state.
bool KeptAttributeIs(Call& get, int val) {
  if (!get.AnsweredFromCache()) return false;
  int value = 0;
  return get.reply().Get(&value) && get.reply().AtEnd() && value == val;
}

}  // namespace

bool RemoteSkipKernelAttributeAsSet(CUresult* result, CUfunction_attribute attrib, int val, CUkernel kernel,
                                    CUdevice dev) {
  // The request cuKernelGetAttribute(&value, attrib, kernel, dev) makes (calls.def's encoding).
  Call get(kOp_cuKernelGetAttribute);
  get.set_cache_handle(HandleBits(kernel));  // calls.def: cached=attributes(kernel)
  get.request().Put<uint8_t>(1);
  get.request().Put(attrib);
  get.request().Put(kernel);
  get.request().Put(dev);
  if (!KeptAttributeIs(get, val)) return false;
  *result = CUDA_SUCCESS;
  return true;
}

bool RemoteSkipFuncAttributeAsSet(CUresult* result, CUfunction hfunc, CUfunction_attribute attrib, int value) {
  // The request cuFuncGetAttribute(&value, attrib, hfunc) makes.
  Call get(kOp_cuFuncGetAttribute);
  get.set_cache_handle(HandleBits(hfunc));  // calls.def: cached=attributes(hfunc)
  get.request().Put<uint8_t>(1);
  get.request().Put(attrib);
  get.request().Put(hfunc);
  if (!KeptAttributeIs(get, value)) return false;
  *result = CUDA_SUCCESS;
  return true;
}

}  // namespace gslice::remote
