#include "launch_hooks.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdint>

#include "cuda_exports.h"
#include "kernel_clock.h"
#include "launch_gate.h"
#include "log.h"
#include "policy.h"
#include "resume_gate.h"
#include "trace_recorder.h"
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
void TraceCompute(const char* line) { Log(LogLevel::kDebug, "%s", line); }

// Stream priority of the compute class: guaranteed work at the greatest priority the
// device offers, opportunistic at the least. kLeavePriority: keep the caller's. The class is
// the one the gate applies now (compute::FollowedClass), so `gslice set --class` reaches the
// streams created after it as it reaches the gate.
constexpr int kLeavePriority = INT32_MIN;
// The device's priority range, asked once (kUnknownRange until the driver answers).
constexpr int kUnknownRange = INT32_MAX;
std::atomic<int> g_least_priority{kUnknownRange};
std::atomic<int> g_greatest_priority{kUnknownRange};

// GSLICE_STREAM_PRIORITY as the shim's constructor read it (ReadStreamPriorityOption):
// whether the class sets stream priorities (class) or the program keeps its own (program).
std::atomic<bool> g_class_sets_priorities{true};

int ClassPriority() {
  const int cls = compute::FollowedClass();
  if (cls < 0 || !g_class_sets_priorities.load(std::memory_order_relaxed)) return kLeavePriority;
  int least = g_least_priority.load(std::memory_order_acquire);
  int greatest = g_greatest_priority.load(std::memory_order_relaxed);
  if (least == kUnknownRange) {
    auto range = Real<CUresult (*)(int*, int*)>(ex::kSlot_cuCtxGetStreamPriorityRange);
    if (range == nullptr || range(&least, &greatest) != CUDA_SUCCESS) return kLeavePriority;  // ask again later
    g_greatest_priority.store(greatest, std::memory_order_relaxed);
    g_least_priority.store(least, std::memory_order_release);
  }
  return cls == static_cast<int>(compute::ComputeClass::kOpportunistic) ? least : greatest;
}

// ---- the default streams at the class's priority --------------------------------------
//
// A context's legacy default stream, and each thread's per-thread default stream, start at
// priority 0, the least a GPU offers, and frameworks (PyTorch among them) run most of their
// work there. For a class with a greater priority (guaranteed), the shim gives them the
// class's priority (cuStreamSetAttribute, CU_STREAM_ATTRIBUTE_PRIORITY) before the first
// kernel or graph launch on them: the legacy stream once per context, a per-thread stream
// once per thread and context. Work stays on the stream the application put it on, so every
// ordering the application relies on holds as written. Each thread remembers the priority it
// gave each default stream in its current context until a context goes away
// (compute::ContextEpoch() moves): a context made later may reuse the handle, and a reset
// primary context starts over at 0. When the class changes (`gslice set --class`), the next
// launch on a default stream sets the new class's priority, back to 0 for opportunistic.
constexpr int kDefaultStreamPriority = 0;  // the default streams' own priority
struct RaisedStreams {
  CUcontext ctx = nullptr;
  uint64_t epoch = ~uint64_t{0};
  int legacy = kDefaultStreamPriority;      // what this thread last asked for
  int per_thread = kDefaultStreamPriority;
};
thread_local RaisedStreams t_raised;

// The last context whose raise was logged, and whether a failure was: one line each.
std::atomic<CUcontext> g_logged_ctx{nullptr};
std::atomic<bool> g_logged_failure{false};

CUcontext CurrentContext() {
  auto get = Real<CUresult (*)(CUcontext*)>(ex::kSlot_cuCtxGetCurrent);
  CUcontext ctx = nullptr;
  if (get == nullptr || get(&ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

bool IsLegacy(CUstream s, bool per_thread) { return s == CU_STREAM_LEGACY || (s == nullptr && !per_thread); }
bool IsPerThread(CUstream s, bool per_thread) { return s == CU_STREAM_PER_THREAD || (s == nullptr && per_thread); }

}  // namespace

CUcontext RaiseDefaultStream(CUstream s, bool per_thread) {
  const int want = ClassPriority();
  if (want == kLeavePriority) return nullptr;
  const bool legacy = IsLegacy(s, per_thread);
  if (!legacy && !IsPerThread(s, per_thread)) return nullptr;
  RaisedStreams& r = t_raised;
  const uint64_t epoch = compute::ContextEpoch();
  if (want == kDefaultStreamPriority && r.legacy == want && r.per_thread == want) return nullptr;  // nothing to change
  CUcontext ctx = CurrentContext();
  if (ctx == nullptr) return nullptr;  // the launch fails on its own
  if (ctx != r.ctx || epoch != r.epoch) r = RaisedStreams{.ctx = ctx, .epoch = epoch};
  int& asked = legacy ? r.legacy : r.per_thread;
  if (asked == want) return ctx;
  asked = want;  // one try per priority: a driver that refuses is not asked again on every launch
  auto set = Real<CUresult (*)(CUstream, CUstreamAttrID, const CUstreamAttrValue*)>(ex::kSlot_cuStreamSetAttribute);
  CUstreamAttrValue value{};
  value.priority = want;
  const CUresult rc = set == nullptr ? CUDA_ERROR_NOT_SUPPORTED
                                     : set(legacy ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD,
                                           CU_STREAM_ATTRIBUTE_PRIORITY, &value);
  if (rc != CUDA_SUCCESS) {
    if (!g_logged_failure.exchange(true)) {
      Log(LogLevel::kWarn, "compute: the driver refused the default stream's priority (error %d); its work keeps priority 0",
          static_cast<int>(rc));
    }
  } else if (legacy && g_logged_ctx.exchange(ctx) != ctx) {
    Log(LogLevel::kInfo, "compute: the default streams of context %p run at stream priority %d",
        static_cast<void*>(ctx), value.priority);
  }
  return ctx;
}

namespace {

// Every launch hook's way through: suspend/resume (resume_gate.h), the compute gate, and,
// while the process records a timeline (trace_recorder.h), the launch as an "api" event with
// its kernel and stream and the time the gate held it as a gate wait. Not recording costs one
// relaxed load.
compute::KernelShape Shape(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned shmem) {
  return {.function = f, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .shared_bytes = shmem};
}

template <typename Launch>
CUresult LaunchThrough(const char* name, const compute::KernelShape& shape, CUstream s, bool per_thread, CUcontext ctx,
                       Launch launch) {
  const CUfunction f = static_cast<CUfunction>(const_cast<void*>(shape.function));
  ResumeGate();
  const bool traced = trace::Recording();
  int64_t start = traced ? trace::NowNs() : 0;
  CUresult r;
  if (!compute::LaunchThroughGate()) {
    r = launch();
  } else {
    const uint32_t waits = traced ? compute::WaitsOfThisThread() : 0;
    const compute::LaunchTicket ticket = compute::BeforeLaunch(s, per_thread, &shape, ctx);
    if (traced && compute::WaitsOfThisThread() != waits) {
      const int64_t passed = trace::NowNs();
      trace::GateWait(start, passed);
      start = passed;
    }
    r = launch();
    compute::AfterLaunch(ticket);
  }
  if (traced) {
    trace::Api({.name = name, .kind = trace::ApiKind::kLaunch, .function = f, .stream = s, .has_stream = true,
                .per_thread = per_thread},
               start, trace::NowNs());
  }
  return r;
}

template <typename Launch>
CUresult LaunchEx(const char* name, CUfunction f, const CUlaunchConfig* config, bool per_thread, Launch launch) {
  const CUstream s = config != nullptr ? config->hStream : nullptr;
  const CUcontext ctx = config != nullptr ? RaiseDefaultStream(s, per_thread) : nullptr;
  compute::KernelShape shape{.function = f};
  if (config != nullptr) {
    shape = {.function = f,
             .grid = {config->gridDimX, config->gridDimY, config->gridDimZ},
             .block = {config->blockDimX, config->blockDimY, config->blockDimZ},
             .shared_bytes = config->sharedMemBytes};
  }
  return LaunchThrough(name, shape, s, per_thread, ctx, [&] { return launch(config); });
}

}  // namespace

void AskMpsForClassPriority() {
  compute::ComputePolicy policy;
  char error[128];
  if (!compute::ParseComputePolicy(nullptr, nullptr, OptionValue(Option::Class), &policy, error, sizeof error)) return;
  if (policy.cls == compute::ComputeClass::kOpportunistic) setenv("CUDA_MPS_CLIENT_PRIORITY", "1", /*overwrite=*/0);
}

void ReadStreamPriorityOption() {
  const char* v = OptionValue(Option::StreamPriority);
  const bool program = strcmp(v, "program") == 0;
  if (!program && strcmp(v, "class") != 0 && v[0] != '\0') {
    Log(LogLevel::kWarn, "%s=%s: not class or program; stream priorities follow the class",
        OptionEnv(Option::StreamPriority), v);
  }
  g_class_sets_priorities.store(!program, std::memory_order_relaxed);
}

void StartLaunchGate(void* const* real, void* real_handle) {
  g_real_handle = real_handle;
  g_real.store(real, std::memory_order_release);
  compute::InitLaunchGate(ResolveReal, LogCompute, LogEnabled(LogLevel::kDebug) ? TraceCompute : nullptr);
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
  const CUcontext ctx = gslice::shim::RaiseDefaultStream(s, false);
  const gslice::compute::KernelShape shape = gslice::shim::Shape(f, gx, gy, gz, bx, by, bz, shmem);
  return gslice::shim::LaunchThrough("cuLaunchKernel", shape, s, false, ctx,
                                     [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                             unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                             CUstream s, void** params, void** extra) {
  auto real = REAL_FN(cuLaunchKernel_ptsz);
  FORWARD_OR_UNINIT(real);
  const CUcontext ctx = gslice::shim::RaiseDefaultStream(s, true);
  const gslice::compute::KernelShape shape = gslice::shim::Shape(f, gx, gy, gz, bx, by, bz, shmem);
  return gslice::shim::LaunchThrough("cuLaunchKernel_ptsz", shape, s, true, ctx,
                                     [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                                          void** extra) {
  auto real = REAL_FN(cuLaunchKernelEx);
  FORWARD_OR_UNINIT(real);
  return gslice::shim::LaunchEx("cuLaunchKernelEx", f, config, false,
                                [&](const CUlaunchConfig* c) { return real(c, f, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                               void** params, void** extra) {
  auto real = REAL_FN(cuLaunchKernelEx_ptsz);
  FORWARD_OR_UNINIT(real);
  return gslice::shim::LaunchEx("cuLaunchKernelEx_ptsz", f, config, true,
                                [&](const CUlaunchConfig* c) { return real(c, f, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                                   unsigned bx, unsigned by, unsigned bz,
                                                                   unsigned shmem, CUstream s, void** params) {
  auto real = REAL_FN(cuLaunchCooperativeKernel);
  FORWARD_OR_UNINIT(real);
  const CUcontext ctx = gslice::shim::RaiseDefaultStream(s, false);
  const gslice::compute::KernelShape shape = gslice::shim::Shape(f, gx, gy, gz, bx, by, bz, shmem);
  return gslice::shim::LaunchThrough("cuLaunchCooperativeKernel", shape, s, false, ctx,
                                     [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                                        unsigned gz, unsigned bx, unsigned by,
                                                                        unsigned bz, unsigned shmem, CUstream s,
                                                                        void** params) {
  auto real = REAL_FN(cuLaunchCooperativeKernel_ptsz);
  FORWARD_OR_UNINIT(real);
  const CUcontext ctx = gslice::shim::RaiseDefaultStream(s, true);
  const gslice::compute::KernelShape shape = gslice::shim::Shape(f, gx, gy, gz, bx, by, bz, shmem);
  return gslice::shim::LaunchThrough("cuLaunchCooperativeKernel_ptsz", shape, s, true, ctx,
                                     [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params); });
}

// Streams the application creates get its class's priority (GSLICE_CLASS given, or the class
// its slice was changed to): within the process, and across processes where the GPU honours
// priorities (MPS). A stream keeps the priority it was created with.
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreate(CUstream* s, unsigned flags) {
  auto real = REAL_FN(cuStreamCreate);
  FORWARD_OR_UNINIT(real);
  const int priority = gslice::shim::ClassPriority();
  auto with_priority = REAL_FN(cuStreamCreateWithPriority);
  return priority == gslice::shim::kLeavePriority || with_priority == nullptr ? real(s, flags)
                                                                               : with_priority(s, flags, priority);
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreateWithPriority(CUstream* s, unsigned flags, int priority) {
  auto real = REAL_FN(cuStreamCreateWithPriority);
  FORWARD_OR_UNINIT(real);
  const int cls = gslice::shim::ClassPriority();
  return real(s, flags, cls == gslice::shim::kLeavePriority ? priority : cls);
}
