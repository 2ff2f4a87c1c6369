#include "module_functions.h"

#include <vector>

#include "call.h"
#include "client_calls.h"
#include "log.h"

namespace gslice::remote {

namespace {

// More functions than any library's run-time-linked module has; bounds what one answer carries.
constexpr unsigned kMaxFunctions = 4096;

int Refused(const char* what, CUresult r, CUmodule module) {
  shim::InitLog();
  const char* name = nullptr;
  if (gslice_remote_call_cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "an unknown error";
  shim::Log(shim::LogLevel::kWarn, "remote: private table module functions (6e163fbe...) slot 7: %s of module %p: %s: "
            "the caller is told there are none", what, static_cast<void*>(module), name);
  return 0;
}

}  // namespace

int ModuleFunctions(CUcontext, CUmodule module, ModuleFunctionCallback callback, void* opaque) {
  unsigned count = 0;
  CUresult r = gslice_remote_call_cuModuleGetFunctionCount(&count, module);
  if (r != CUDA_SUCCESS) return Refused("cuModuleGetFunctionCount", r, module);
  if (count == 0) return 0;
  if (count > kMaxFunctions) return Refused("more than 4096 functions", CUDA_ERROR_NOT_SUPPORTED, module);
  std::vector<CUfunction> functions(count);
  r = gslice_remote_call_cuModuleEnumerateFunctions(functions.data(), count, module);
  if (r != CUDA_SUCCESS) return Refused("cuModuleEnumerateFunctions", r, module);
  for (CUfunction f : functions) {
    // As cuModuleGetFunction's answers are: the kept answers relate a module's functions to it.
    NoteModuleFunction(module, f);
    if (callback != nullptr) callback(opaque, f, 0);
  }
  return static_cast<int>(count);
}

}  // namespace gslice::remote
