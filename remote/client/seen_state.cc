// What the client answers from what it has seen its own program do, without a round trip:
// whether a stream captures while no capture is under way in the process, and setting a
// function attribute to the value the client already knows it has. Frameworks make these
// calls around every launch (cudart asks whether the launch's stream captures; cuDNN sets a
// kernel's dynamic shared memory before each launch).
//
// Contexts' devices: a fixed table read without a lock. A writer (under g_contexts_mu) fills an
// entry's device before its context (release), a reader matches the context (acquire) and then
// reads the device; a context is forgotten by clearing its entry's context first. A reader can
// see a wrong device only for a context destroyed while it asks, which the driver does not
// answer either. More contexts than the table holds are answered the usual way.
//
// Attribute sets the driver accepts. The driver takes a kernel's or function's maximum dynamic
// shared memory when 0 <= value and value + its static shared memory <= the device's opt-in
// maximum; both bounds are fixed for a handle (and a kernel's device), so once a set to V
// succeeded, every set of that handle to a value in [0, V] succeeds too. Its shared-memory
// carveout takes any value from -1 (the default) to 100 for a valid handle, and a handle that
// had a set accepted is valid until its module or context goes. So those sets are sent without
// waiting (cuDNN sets a kernel's dynamic shared memory before its launches, alternating between
// a few values), and a driver error would still reach the program, at its next
// synchronisation. Handles are forgotten when any module or library is loaded or unloaded or a
// context is destroyed, released or reset (a handle value may then name another function); a
// set answered across such a forgetting is not remembered (the generation).
//
// Streams and captures: every stream the program has comes from this client's cuStreamCreate*
// (or is the NULL, legacy or per-thread stream), and every capture starts with its
// cuStreamBeginCapture; so while no capture is under way, a stream the client knows is not
// capturing (CU_STREAM_CAPTURE_STATUS_NONE), as the driver would answer. Once one is under way
// (another stream may have joined it through an event), and for a stream the client does not
// know (destroyed, or never made: the driver's error belongs to the driver), the worker answers.
#include <cuda.h>
#include <pthread.h>

#include <unistd.h>

#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "call.h"
#include "call_stats.h"
#include "context_stack.h"
#include "log.h"
#include "seen_state.h"
#include "transport.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace {

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
// REQUIRES g_mu. Never freed: calls may come during exit.
std::unordered_set<CUstream>* g_streams = nullptr;    // made by this client, not destroyed
std::unordered_set<CUstream>* g_capturing = nullptr;  // cuStreamBeginCapture'd, not ended

bool Special(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

struct ContextDevice {
  std::atomic<CUcontext> ctx{nullptr};
  std::atomic<int> device{-1};
  std::atomic<bool> primary{false};
};
constexpr size_t kContextDevices = 64;
ContextDevice g_context_devices[kContextDevices];
pthread_mutex_t g_contexts_mu = PTHREAD_MUTEX_INITIALIZER;  // writers of g_context_devices
// The process whose worker made the contexts (a forked child's worker makes its own, whose
// handles may equal the parent's).
std::atomic<pid_t> g_contexts_pid{0};

// The device of ctx as the client saw it made, or -1.
int DeviceOf(CUcontext ctx) {
  if (ctx == nullptr || g_contexts_pid.load(std::memory_order_acquire) != ThisProcess()) return -1;
  for (const ContextDevice& e : g_context_devices) {
    if (e.ctx.load(std::memory_order_acquire) == ctx) return e.device.load(std::memory_order_relaxed);
  }
  return -1;
}

void Insert(std::unordered_set<CUstream>** set, CUstream s) {
  if (*set == nullptr) *set = new std::unordered_set<CUstream>();
  (*set)->insert(s);
}

}  // namespace

void RememberContextDevice(CUcontext ctx, CUdevice dev, bool primary) {
  if (ctx == nullptr || dev < 0) return;
  pthread_mutex_lock(&g_contexts_mu);
  if (g_contexts_pid.load(std::memory_order_relaxed) != ThisProcess()) {
    for (ContextDevice& e : g_context_devices) e.ctx.store(nullptr, std::memory_order_relaxed);
    g_contexts_pid.store(ThisProcess(), std::memory_order_release);
  }
  ContextDevice* free_entry = nullptr;
  for (ContextDevice& e : g_context_devices) {
    const CUcontext at = e.ctx.load(std::memory_order_relaxed);
    if (at == ctx) {  // known already (a primary context retained again)
      pthread_mutex_unlock(&g_contexts_mu);
      return;
    }
    if (at == nullptr && free_entry == nullptr) free_entry = &e;
  }
  if (free_entry != nullptr) {
    free_entry->device.store(dev, std::memory_order_relaxed);
    free_entry->primary.store(primary, std::memory_order_relaxed);
    free_entry->ctx.store(ctx, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_contexts_mu);
}

void ForgetContextDevice(CUcontext ctx) {
  pthread_mutex_lock(&g_contexts_mu);
  for (ContextDevice& e : g_context_devices) {
    if (e.ctx.load(std::memory_order_relaxed) == ctx) e.ctx.store(nullptr, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_contexts_mu);
}

void ForgetPrimaryContextDevice(CUdevice dev) {
  pthread_mutex_lock(&g_contexts_mu);
  for (ContextDevice& e : g_context_devices) {
    if (e.ctx.load(std::memory_order_relaxed) != nullptr && e.primary.load(std::memory_order_relaxed) &&
        e.device.load(std::memory_order_relaxed) == dev) {
      e.ctx.store(nullptr, std::memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_contexts_mu);
}

bool RemoteAnswerContextDevice(CUresult* result, CUdevice* device) {
  const int dev = DeviceOf(CurrentContext());
  if (device == nullptr || dev < 0) return false;
  *device = dev;
  *result = CUDA_SUCCESS;
  CountCall(kCachedCall, kOp_cuCtxGetDevice);
  Log(LogLevel::kDebug, "remote: cuCtxGetDevice answered from the client's cache");
  return true;
}

bool RemoteAnswerContextDeviceOf(CUresult* result, CUdevice* device, CUcontext ctx) {
  const int dev = DeviceOf(ctx != nullptr ? ctx : CurrentContext());
  if (device == nullptr || dev < 0) return false;
  *device = dev;
  *result = CUDA_SUCCESS;
  CountCall(kCachedCall, kOp_cuCtxGetDevice_v2);
  Log(LogLevel::kDebug, "remote: cuCtxGetDevice_v2 answered from the client's cache");
  return true;
}

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

// Sets the driver accepted, per (call, handle, device): the largest dynamic shared memory
// accepted (-1: none yet, only a carveout). REQUIRES g_sets_mu. Never freed.
struct SetKey {
  uint32_t op;
  uint64_t handle;
  int device;
  bool operator==(const SetKey&) const = default;
};
struct SetKeyHash {
  size_t operator()(const SetKey& k) const { return std::hash<uint64_t>()(k.handle * 31 + k.op * 7 + k.device); }
};
pthread_mutex_t g_sets_mu = PTHREAD_MUTEX_INITIALIZER;
std::unordered_map<SetKey, int, SetKeyHash>* g_accepted = nullptr;  // REQUIRES g_sets_mu
uint64_t g_sets_generation = 0;                                     // REQUIRES g_sets_mu: counts forgettings
pid_t g_sets_pid = 0;  // the process whose worker accepted them (a forked child has its own)

// Whether the driver is known to accept this set; *generation gets the table's generation.
bool KnownAccepted(const SetKey& key, CUfunction_attribute attrib, int val, uint64_t* generation) {
  pthread_mutex_lock(&g_sets_mu);
  if (g_sets_pid != ThisProcess() && g_accepted != nullptr) g_accepted->clear();
  g_sets_pid = ThisProcess();
  *generation = g_sets_generation;
  bool known = false;
  if (g_accepted != nullptr) {
    const auto it = g_accepted->find(key);
    if (it != g_accepted->end()) {
      known = attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ? val >= 0 && val <= it->second
              : attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT ? val >= -1 && val <= 100
                                                                           : false;
    }
  }
  pthread_mutex_unlock(&g_sets_mu);
  return known;
}

// The driver accepted this set (answered by it), unless handles were forgotten since generation.
void NoteAccepted(const SetKey& key, CUfunction_attribute attrib, int val, uint64_t generation) {
  pthread_mutex_lock(&g_sets_mu);
  if (generation == g_sets_generation) {
    if (g_accepted == nullptr) g_accepted = new std::unordered_map<SetKey, int, SetKeyHash>();
    auto [it, added] = g_accepted->emplace(key, -1);
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && val > it->second) it->second = val;
  }
  pthread_mutex_unlock(&g_sets_mu);
}

// Sends a set built in `set` (calls.def: async): without waiting when the driver is known to
// accept it, else as a round trip.
CUresult SendSet(Call& set, const SetKey& key, CUfunction_attribute attrib, int val) {
  uint64_t generation = 0;
  const bool known = KnownAccepted(key, attrib, val, &generation);
  if (!known) set.WaitForAnswer();
  const CUresult result = set.Run();
  if (known || !set.answered()) return result;
  if (!set.reply().AtEnd()) return set.Malformed();
  if (result == CUDA_SUCCESS) NoteAccepted(key, attrib, val, generation);
  return result;
}

}  // namespace

void ForgetAcceptedSets() {
  pthread_mutex_lock(&g_sets_mu);
  if (g_accepted != nullptr) g_accepted->clear();
  ++g_sets_generation;
  pthread_mutex_unlock(&g_sets_mu);
}

bool RemoteSetKernelAttribute(CUresult* result, CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  // The request cuKernelGetAttribute(&value, attrib, kernel, dev) makes (calls.def's encoding).
  Call get(kOp_cuKernelGetAttribute);
  get.set_cache_handle(HandleBits(kernel));  // calls.def: cached=attributes(kernel)
  get.request().Put<uint8_t>(1);
  get.request().Put(attrib);
  get.request().Put(kernel);
  get.request().Put(dev);
  if (KeptAttributeIs(get, val)) {
    *result = CUDA_SUCCESS;
    return true;
  }
  // cuKernelSetAttribute(attrib, val, kernel, dev), as calls.def encodes it.
  Call set(kOp_cuKernelSetAttribute);
  set.set_cache_handle(HandleBits(kernel));  // calls.def: drops=attributes(kernel)
  set.request().Put(attrib);
  set.request().Put(val);
  set.request().Put(kernel);
  set.request().Put(dev);
  *result = SendSet(set, SetKey{.op = kOp_cuKernelSetAttribute, .handle = HandleBits(kernel), .device = dev}, attrib, val);
  return true;
}

bool RemoteSetFuncAttribute(CUresult* result, CUfunction hfunc, CUfunction_attribute attrib, int value) {
  // The request cuFuncGetAttribute(&value, attrib, hfunc) makes.
  Call get(kOp_cuFuncGetAttribute);
  get.set_cache_handle(HandleBits(hfunc));  // calls.def: cached=attributes(hfunc)
  get.request().Put<uint8_t>(1);
  get.request().Put(attrib);
  get.request().Put(hfunc);
  if (KeptAttributeIs(get, value)) {
    *result = CUDA_SUCCESS;
    return true;
  }
  // cuFuncSetAttribute(hfunc, attrib, value), as calls.def encodes it. A function is of one
  // context, so of one device.
  Call set(kOp_cuFuncSetAttribute);
  set.set_cache_handle(HandleBits(hfunc));  // calls.def: drops=attributes(hfunc)
  set.request().Put(hfunc);
  set.request().Put(attrib);
  set.request().Put(value);
  *result = SendSet(set, SetKey{.op = kOp_cuFuncSetAttribute, .handle = HandleBits(hfunc), .device = 0}, attrib, value);
  return true;
}

}  // namespace gslice::remote
