// The shim's launch hooks (listed in interpose/hooks.def, defined in launch_hooks.cc): every
// kernel and graph launch passes the launch gate (launch_gate.h); stream creation maps the
// compute class to a stream priority.
#pragma once

#include <cuda.h>

namespace gslice::shim {

// Called by the cuInit hook: gives the hooks the shim's table of real driver functions
// (indexed by cuda_exports slots, filled at load time) and starts the gate. Until then the
// hooks forward to the real driver through the same table.
void StartLaunchGate(void* const* real, void* real_handle);

// Called by the shim's constructor, before the application can create a context: where the
// node runs MPS, an opportunistic process asks it for below-normal client priority
// (CUDA_MPS_CLIENT_PRIORITY=1, read by the driver when it connects to the MPS server, and
// ignored without MPS). A value the user set is kept.
void AskMpsForClassPriority();
// Called by the shim's constructor: reads GSLICE_STREAM_PRIORITY once (class: the class sets
// stream priorities; program: the program keeps its own), warning of any other value.
void ReadStreamPriorityOption();

// The default streams at the class's priority (launch_hooks.cc, docs/compute.md): before a
// guaranteed process's first kernel or graph launch on a context's legacy default stream, or
// on a thread's per-thread default stream, that stream gets the class's priority. s: the
// launch's stream; per_thread: the caller is a _ptsz variant (where nullptr names the
// per-thread stream). A context that goes away (compute::ForgetContext) is raised afresh.
// Returns the calling thread's current context where it read it (for compute::BeforeLaunch,
// so that a launch asks the driver once), else nullptr.
CUcontext RaiseDefaultStream(CUstream s, bool per_thread);

}  // namespace gslice::shim

#define GSLICE_COMPUTE_HOOK extern "C" __attribute__((visibility("hidden")))
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                        unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                                        void** params, void** extra);
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                             unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                             CUstream s, void** params, void** extra);
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                                          void** extra);
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                               void** params, void** extra);
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                                   unsigned bx, unsigned by, unsigned bz,
                                                                   unsigned shmem, CUstream s, void** params);
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                                        unsigned gz, unsigned bx, unsigned by,
                                                                        unsigned bz, unsigned shmem, CUstream s,
                                                                        void** params);
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreate(CUstream* s, unsigned flags);
GSLICE_COMPUTE_HOOK CUresult gslice_hook_cuStreamCreateWithPriority(CUstream* s, unsigned flags, int priority);
