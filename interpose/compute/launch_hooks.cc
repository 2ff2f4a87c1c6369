#include "launch_hooks.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuda_exports.h"
#include "launch_gate.h"
#include "log.h"
#include "policy.h"
#include "resume_gate.h"
#include "gslice/options.h"

namespace gslice::shim {
namespace {

namespace ex = cuda_exports;

std::atomic<void* const*> g_real{nullptr};
void* g_real_handle = nullptr;

template <typename F>
F Real(int slot) {
  void* const* table = g_real.load(std::memory_order_acquire);
  return table == nullptr ? nullptr : reinterpret_cast<F>(table[slot]);
}

#define REAL_FN(sym) Real<decltype(&gslice_hook_##sym)>(ex::kSlot_##sym)

void* ResolveReal(const char* name) { return dlsym(g_real_handle, name); }

void LogCompute(const char* line) { Log(LogLevel::kWarn, "%s", line); }

// Stream priority of the compute class: guaranteed work at the greatest priority the
// device offers, opportunistic at the least. kLeavePriority: keep the caller's.
constexpr int kLeavePriority = INT32_MIN;
constexpr int kUndecided = INT32_MAX;
std::atomic<int> g_class_priority{kUndecided};

// Whether the legacy default stream's work goes to a class stream (below): the class has a
// priority and it is not the default stream's own (0, the device's least).
std::atomic<bool> g_map_legacy{false};

int ClassPriority() {
  int p = g_class_priority.load(std::memory_order_acquire);
  if (p != kUndecided) return p;
  compute::ComputePolicy policy;
  char error[128];
  int chosen = kLeavePriority;
  int least = 0, greatest = 0;
  if (compute::ParseComputePolicy(nullptr, nullptr, OptionValue(Option::Class), &policy, error, sizeof error) &&
      OptionIsSet(Option::Class)) {
    auto range = Real<CUresult (*)(int*, int*)>(ex::kSlot_cuCtxGetStreamPriorityRange);
    if (range == nullptr || range(&least, &greatest) != CUDA_SUCCESS) return kLeavePriority;  // ask again later
    chosen = policy.cls == compute::ComputeClass::kOpportunistic ? least : greatest;
  }
  g_map_legacy.store(chosen != kLeavePriority && chosen != 0 && chosen != least, std::memory_order_relaxed);
  g_class_priority.store(chosen, std::memory_order_release);
  return chosen;
}

bool MapsLegacy() {
  if (g_class_priority.load(std::memory_order_acquire) == kUndecided) ClassPriority();
  return g_map_legacy.load(std::memory_order_relaxed);
}

// ---- the default stream at the class's priority ---------------------------------------
//
// The legacy default stream has priority 0, the least a GPU offers, and the driver lets no
// one change it; frameworks (PyTorch among them) run most of their work there. For a class
// with a greater priority (guaranteed), work the application puts on the legacy stream of a
// context goes to a *class stream* instead: one blocking stream per context, created at the
// class's priority. A blocking stream keeps the legacy stream's ordering both ways (every
// legacy-stream operation waits for the blocking streams' earlier work, and they wait for
// its), so copies, memsets, waits and host callbacks left on the legacy stream stay in
// order with the kernels moved off it. What a blocking stream does not have is the legacy
// stream's ordering with the application's *other* blocking streams and with per-thread
// default streams: the first time a context shows either (a blocking stream created, a
// per-thread default stream used), the class stream is drained and the context's legacy
// work stays where the application put it from then on.
struct ClassStream {
  CUcontext ctx = nullptr;
  CUdevice dev = -1;
  CUstream stream = nullptr;  // nullptr: this context's legacy work is not moved
};
constexpr int kMaxClassStreams = 32;
std::mutex g_class_mu;
ClassStream g_class_streams[kMaxClassStreams];
int g_class_count = 0;
// Bumped whenever an entry stops mapping or goes away: threads' cached lookups expire.
std::atomic<uint64_t> g_class_generation{1};

CUcontext CurrentContext() {
  auto get = Real<CUresult (*)(CUcontext*)>(ex::kSlot_cuCtxGetCurrent);
  CUcontext ctx = nullptr;
  if (get == nullptr || get(&ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

bool IsLegacy(CUstream s, bool per_thread) { return s == CU_STREAM_LEGACY || (s == nullptr && !per_thread); }
bool IsPerThread(CUstream s, bool per_thread) { return s == CU_STREAM_PER_THREAD || (s == nullptr && per_thread); }

// ctx's entry (g_class_mu held); creates it, with a class stream when create is set.
ClassStream* ClassEntry(CUcontext ctx, bool create) {
  for (int i = 0; i < g_class_count; ++i) {
    if (g_class_streams[i].ctx == ctx) return &g_class_streams[i];
  }
  if (g_class_count == kMaxClassStreams) return nullptr;
  ClassStream& e = g_class_streams[g_class_count++];
  e = ClassStream{ctx, -1, nullptr};
  auto get_device = Real<CUresult (*)(CUdevice*)>(ex::kSlot_cuCtxGetDevice);
  if (get_device != nullptr) get_device(&e.dev);
  auto with_priority = Real<CUresult (*)(CUstream*, unsigned, int)>(ex::kSlot_cuStreamCreateWithPriority);
  if (create && with_priority != nullptr && with_priority(&e.stream, CU_STREAM_DEFAULT, ClassPriority()) != CUDA_SUCCESS) {
    e.stream = nullptr;
    Log(LogLevel::kWarn, "compute: cannot create a stream at the class's priority; default-stream work keeps its own");
  } else if (e.stream != nullptr) {
    Log(LogLevel::kInfo, "compute: default-stream work of context %p runs at stream priority %d", static_cast<void*>(ctx),
        ClassPriority());
  }
  return &e;
}

// Each thread remembers its last context's answer until the generation moves.
struct ClassCache {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  uint64_t generation = 0;
};
thread_local ClassCache t_class_cache;

// The class stream behind ctx's legacy stream (created at the first call), or nullptr.
CUstream ClassStreamOf(CUcontext ctx) {
  ClassCache& c = t_class_cache;
  const uint64_t generation = g_class_generation.load(std::memory_order_acquire);
  if (ctx == c.ctx && generation == c.generation) return c.stream;
  std::lock_guard<std::mutex> lock(g_class_mu);
  ClassStream* e = ClassEntry(ctx, /*create=*/true);
  c = ClassCache{ctx, e != nullptr ? e->stream : nullptr, generation};
  return c.stream;
}

// ctx's legacy work stays on the legacy stream from now on; what went to its class stream so
// far is finished first, so nothing the application orders after this point can overtake it.
// True when it stopped the moving just now (false: already stopped, or never moved).
bool StopMovingLegacyWork(CUcontext ctx) {
  ClassCache& c = t_class_cache;
  if (ctx == c.ctx && c.stream == nullptr && g_class_generation.load(std::memory_order_acquire) == c.generation) {
    return false;
  }
  bool stopped = false;
  std::lock_guard<std::mutex> lock(g_class_mu);
  ClassStream* e = ClassEntry(ctx, /*create=*/false);
  if (e != nullptr && e->stream != nullptr) {
    // Relaxed capture mode: a capture under way in this thread must not be invalidated by a
    // wait on a stream it does not involve. The stream itself is kept (another thread may be
    // launching on it right now); it is idle from here on.
    auto exchange = Real<CUresult (*)(CUstreamCaptureMode*)>(ex::kSlot_cuThreadExchangeStreamCaptureMode);
    auto sync = Real<CUresult (*)(CUstream)>(ex::kSlot_cuStreamSynchronize);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool exchanged = exchange != nullptr && exchange(&mode) == CUDA_SUCCESS;
    if (sync != nullptr) sync(e->stream);
    if (exchanged) exchange(&mode);
    e->stream = nullptr;
    g_class_generation.fetch_add(1, std::memory_order_acq_rel);
    stopped = true;
  }
  if (e != nullptr) c = ClassCache{ctx, nullptr, g_class_generation.load(std::memory_order_acquire)};
  return stopped;
}

}  // namespace

CUstream ClassStreamFor(CUstream s, bool per_thread, const char* call) {
  NoteStreamUse(s, per_thread, call);
  CUstream moved = ClassStreamBehind(s, per_thread);
  return moved != nullptr ? moved : s;
}

CUstream ClassStreamBehind(CUstream s, bool per_thread) {
  if (!IsLegacy(s, per_thread) || !MapsLegacy()) return nullptr;
  CUcontext ctx = CurrentContext();
  return ctx != nullptr ? ClassStreamOf(ctx) : nullptr;
}

namespace {

// what, call: what the context showed and in which call, for the log.
void EndMoving(const char* what, const char* call) {
  if (!MapsLegacy()) return;
  CUcontext ctx = CurrentContext();
  if (ctx == nullptr || !StopMovingLegacyWork(ctx)) return;
  Log(LogLevel::kInfo, "compute: context %p showed %s (%s); its default-stream work stays there from now on",
      static_cast<void*>(ctx), what, call);
  if (LogEnabled(LogLevel::kDebug)) {
    // Which library made the call: the stack, one frame a line (libc's own writer; called
    // with no lock of ours held, as it may load libgcc_s the first time).
    void* frames[24];
    backtrace_symbols_fd(frames, backtrace(frames, 24), STDERR_FILENO);
  }
}

}  // namespace

void NoteBlockingStream(const char* call) { EndMoving("a blocking stream", call); }

void NoteStreamUse(CUstream s, bool per_thread, const char* call) {
  // A per-thread stream orders like a blocking one.
  if (IsPerThread(s, per_thread)) EndMoving("a per-thread default stream", call);
}

void ForgetClassStreams(CUcontext ctx, CUdevice dev) {
  std::lock_guard<std::mutex> lock(g_class_mu);
  int kept = 0;
  for (int i = 0; i < g_class_count; ++i) {
    const ClassStream& e = g_class_streams[i];
    if (e.ctx == ctx || (ctx == nullptr && e.dev == dev)) continue;
    g_class_streams[kept++] = e;
  }
  if (kept == g_class_count) return;
  g_class_count = kept;
  g_class_generation.fetch_add(1, std::memory_order_acq_rel);
}

namespace {

template <typename Launch>
CUresult Gated(CUstream s, bool per_thread, Launch launch) {
  ResumeGate();  // suspend/resume (resume_gate.h)
  if (!compute::LaunchGateActive()) return launch();
  compute::BeforeLaunch(s, per_thread);
  CUresult r = launch();
  compute::AfterLaunch(s, per_thread);
  return r;
}

// cuLaunchKernelEx: the launch goes through a copy of the caller's config when its stream
// moves to the class stream.
template <typename Launch>
CUresult LaunchEx(const CUlaunchConfig* config, bool per_thread, Launch launch) {
  if (config == nullptr) return Gated(nullptr, per_thread, [&] { return launch(config); });
  const char* call = per_thread ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernelEx";
  const CUstream s = ClassStreamFor(config->hStream, per_thread, call);
  if (s == config->hStream) return Gated(s, per_thread, [&] { return launch(config); });
  CUlaunchConfig moved = *config;
  moved.hStream = s;
  return Gated(s, per_thread, [&] { return launch(&moved); });
}

}  // namespace

void AskMpsForClassPriority() {
  compute::ComputePolicy policy;
  char error[128];
  if (!compute::ParseComputePolicy(nullptr, nullptr, OptionValue(Option::Class), &policy, error, sizeof error)) return;
  if (policy.cls == compute::ComputeClass::kOpportunistic) setenv("CUDA_MPS_CLIENT_PRIORITY", "1", /*overwrite=*/0);
}

void StartLaunchGate(void* const* real, void* real_handle) {
  g_real_handle = real_handle;
  g_real.store(real, std::memory_order_release);
  compute::InitLaunchGate(ResolveReal, LogCompute);
}

}  // namespace gslice::shim

using gslice::shim::Real;
namespace ex = gslice::cuda_exports;

#define FORWARD_OR_UNINIT(fn) \
  if (fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                        unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                                        void** params, void** extra) {
  auto real = REAL_FN(cuLaunchKernel);
  FORWARD_OR_UNINIT(real);
  s = gslice::shim::ClassStreamFor(s, false, "cuLaunchKernel");
  return gslice::shim::Gated(s, false, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                             unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                             CUstream s, void** params, void** extra) {
  auto real = REAL_FN(cuLaunchKernel_ptsz);
  FORWARD_OR_UNINIT(real);
  s = gslice::shim::ClassStreamFor(s, true, "cuLaunchKernel_ptsz");
  return gslice::shim::Gated(s, true, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                                          void** extra) {
  auto real = REAL_FN(cuLaunchKernelEx);
  FORWARD_OR_UNINIT(real);
  return gslice::shim::LaunchEx(config, false, [&](const CUlaunchConfig* c) { return real(c, f, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                               void** params, void** extra) {
  auto real = REAL_FN(cuLaunchKernelEx_ptsz);
  FORWARD_OR_UNINIT(real);
  return gslice::shim::LaunchEx(config, true, [&](const CUlaunchConfig* c) { return real(c, f, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                                   unsigned bx, unsigned by, unsigned bz,
                                                                   unsigned shmem, CUstream s, void** params) {
  auto real = REAL_FN(cuLaunchCooperativeKernel);
  FORWARD_OR_UNINIT(real);
  s = gslice::shim::ClassStreamFor(s, false, "cuLaunchCooperativeKernel");
  return gslice::shim::Gated(s, false, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                                        unsigned gz, unsigned bx, unsigned by,
                                                                        unsigned bz, unsigned shmem, CUstream s,
                                                                        void** params) {
  auto real = REAL_FN(cuLaunchCooperativeKernel_ptsz);
  FORWARD_OR_UNINIT(real);
  s = gslice::shim::ClassStreamFor(s, true, "cuLaunchCooperativeKernel_ptsz");
  return gslice::shim::Gated(s, true, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params); });
}

// Streams the application creates get its class's priority (GSLICE_CLASS given): within
// the process, and across processes where the GPU honours priorities (MPS).
// A blocking stream of the application's own ends the moving of its context's legacy work
// (see ClassStream above).
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreate(CUstream* s, unsigned flags) {
  auto real = REAL_FN(cuStreamCreate);
  FORWARD_OR_UNINIT(real);
  const int priority = gslice::shim::ClassPriority();
  auto with_priority = REAL_FN(cuStreamCreateWithPriority);
  CUresult r = priority == gslice::shim::kLeavePriority || with_priority == nullptr ? real(s, flags)
                                                                                     : with_priority(s, flags, priority);
  if (r == CUDA_SUCCESS && (flags & CU_STREAM_NON_BLOCKING) == 0) {
    gslice::shim::NoteBlockingStream("cuStreamCreate");
  }
  return r;
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreateWithPriority(CUstream* s, unsigned flags, int priority) {
  auto real = REAL_FN(cuStreamCreateWithPriority);
  FORWARD_OR_UNINIT(real);
  const int cls = gslice::shim::ClassPriority();
  CUresult r = real(s, flags, cls == gslice::shim::kLeavePriority ? priority : cls);
  if (r == CUDA_SUCCESS && (flags & CU_STREAM_NON_BLOCKING) == 0) {
    gslice::shim::NoteBlockingStream("cuStreamCreateWithPriority");
  }
  return r;
}
