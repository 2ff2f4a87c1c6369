// The private module table (6e163fbe, export_tables.cc) slot 7: a module's functions, each handed
// to the caller's callback, without their names. cuFFT links some of its kernels at run time
// (nvJitLink), loads the image with cuModuleLoadData and takes the module's one function this
// way: it calls slot 7 with the current context, the module, a callback that keeps the function
// it is given and that callback's argument, and goes on only when slot 7 returns 1.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gslice::remote {

using ModuleFunctionCallback = void (*)(void* opaque, CUfunction function, uint64_t owner);

// Calls callback(opaque, f, 0) for each function f of module, in the driver's order, on the
// calling thread, and returns how many there were (what the driver's slot returns, not a
// CUresult). The functions are the worker's, asked for with the public
// cuModuleGetFunctionCount and cuModuleEnumerateFunctions (two round trips). 0, with a log line
// naming the error, when the worker's driver refuses them; ctx is the module's context as the
// caller names it (the calling thread's current one for cuFFT), not made current here.
int ModuleFunctions(CUcontext ctx, CUmodule module, ModuleFunctionCallback callback, void* opaque);

}  // namespace gslice::remote
