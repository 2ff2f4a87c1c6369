// The client's hand-written calls of calls.def (local_calls.cc): what the rest of the client
// tells them.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "wire.h"

namespace gslice::remote {

// The kernel-parameter layouts cached per function are dropped when modules come and go
// (a new function may reuse a freed handle).
void ForgetKernelLayouts();

// A kernel's arguments as a launch or a graph's kernel node passes them: kernelParams, one
// host pointer per parameter, with each parameter's size from the worker's cuFuncGetParamInfo
// (cached per function), or extra's parameter buffer.
struct KernelArguments {
  void** params = nullptr;
  std::vector<uint32_t> sizes;  // of params' pointees
  const void* buffer = nullptr;  // extra's, when params is NULL
  uint64_t buffer_size = 0;
};
// Reads params or extra (at most one non-NULL; neither: a kernel without parameters) of a kernel f. May make calls of its own (the
// layout): REQUIRES no Call of this thread under way.
CUresult ReadKernelArguments(CUfunction f, void** params, void** extra, KernelArguments* out);
// Writes them as launch.h's EncodeLaunchParams does. False when one of kernelParams is NULL.
bool EncodeKernelArguments(const KernelArguments& arguments, Writer* w);

}  // namespace gslice::remote
