#include "launch_hooks.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>

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

int ClassPriority() {
  int p = g_class_priority.load(std::memory_order_relaxed);
  if (p != kUndecided) return p;
  compute::ComputePolicy policy;
  char error[128];
  int chosen = kLeavePriority;
  if (compute::ParseComputePolicy(nullptr, nullptr, OptionValue(Option::Class), &policy, error, sizeof error) &&
      OptionIsSet(Option::Class)) {
    int least = 0, greatest = 0;
    auto range = Real<CUresult (*)(int*, int*)>(ex::kSlot_cuCtxGetStreamPriorityRange);
    if (range != nullptr && range(&least, &greatest) == CUDA_SUCCESS) {
      chosen = policy.cls == compute::ComputeClass::kOpportunistic ? least : greatest;
    }
  }
  g_class_priority.store(chosen, std::memory_order_relaxed);
  return chosen;
}

template <typename Launch>
CUresult Gated(CUstream s, bool per_thread, Launch launch) {
  ResumeGate();  // suspend/resume (resume_gate.h)
  if (!compute::LaunchGateActive()) return launch();
  compute::BeforeLaunch(s, per_thread);
  CUresult r = launch();
  compute::AfterLaunch(s, per_thread);
  return r;
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
  return gslice::shim::Gated(s, false, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                             unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                             CUstream s, void** params, void** extra) {
  auto real = REAL_FN(cuLaunchKernel_ptsz);
  FORWARD_OR_UNINIT(real);
  return gslice::shim::Gated(s, true, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                                          void** extra) {
  auto real = REAL_FN(cuLaunchKernelEx);
  FORWARD_OR_UNINIT(real);
  CUstream s = config != nullptr ? config->hStream : nullptr;
  return gslice::shim::Gated(s, false, [&] { return real(config, f, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                               void** params, void** extra) {
  auto real = REAL_FN(cuLaunchKernelEx_ptsz);
  FORWARD_OR_UNINIT(real);
  CUstream s = config != nullptr ? config->hStream : nullptr;
  return gslice::shim::Gated(s, true, [&] { return real(config, f, params, extra); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                                   unsigned bx, unsigned by, unsigned bz,
                                                                   unsigned shmem, CUstream s, void** params) {
  auto real = REAL_FN(cuLaunchCooperativeKernel);
  FORWARD_OR_UNINIT(real);
  return gslice::shim::Gated(s, false, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params); });
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                                        unsigned gz, unsigned bx, unsigned by,
                                                                        unsigned bz, unsigned shmem, CUstream s,
                                                                        void** params) {
  auto real = REAL_FN(cuLaunchCooperativeKernel_ptsz);
  FORWARD_OR_UNINIT(real);
  return gslice::shim::Gated(s, true, [&] { return real(f, gx, gy, gz, bx, by, bz, shmem, s, params); });
}

// Streams the application creates get its class's priority (GSLICE_CLASS given): within
// the process, and across processes where the GPU honours priorities (MPS).
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreate(CUstream* s, unsigned flags) {
  auto real = REAL_FN(cuStreamCreate);
  FORWARD_OR_UNINIT(real);
  const int priority = gslice::shim::ClassPriority();
  auto with_priority = REAL_FN(cuStreamCreateWithPriority);
  if (priority == gslice::shim::kLeavePriority || with_priority == nullptr) return real(s, flags);
  return with_priority(s, flags, priority);
}

GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreateWithPriority(CUstream* s, unsigned flags, int priority) {
  auto real = REAL_FN(cuStreamCreateWithPriority);
  FORWARD_OR_UNINIT(real);
  const int cls = gslice::shim::ClassPriority();
  return real(s, flags, cls == gslice::shim::kLeavePriority ? priority : cls);
}
