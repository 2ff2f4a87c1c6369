// cuGetProcAddress over the table of implemented entry points, and error names/strings.
#include <atomic>
#include <cstring>

#include "driver.h"

using namespace gslice::sim;

// Each symbol of the table, bound by its exported name (the prototypes differ; the table
// only hands out addresses).
#define ENTRY(name, version, symbol) extern "C" void gslice_sim_ref_##symbol() __asm__(#symbol);
#define ENTRY_PT(name, version, symbol, pt) \
  ENTRY(name, version, symbol)              \
  extern "C" void gslice_sim_ref_##pt() __asm__(#pt);
#include "entry_points.inc"
#undef ENTRY
#undef ENTRY_PT

namespace {

struct EntryPoint {
  const char* name;
  int version;
  void* fn;
  void* per_thread;
};

#define ENTRY(name, version, symbol) \
  {#name, version, reinterpret_cast<void*>(&gslice_sim_ref_##symbol), nullptr},
#define ENTRY_PT(name, version, symbol, pt)                               \
  {#name, version, reinterpret_cast<void*>(&gslice_sim_ref_##symbol),     \
   reinterpret_cast<void*>(&gslice_sim_ref_##pt)},
const EntryPoint kEntryPoints[] = {
#include "entry_points.inc"
};
#undef ENTRY
#undef ENTRY_PT

struct ErrorName {
  int code;
  const char* name;
};

const ErrorName kErrorNames[] = {
#include "error_names.inc"
};

const char* ErrorString(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return "no kernel image is available for execution on the device";
    case CUDA_ERROR_INVALID_PTX: return "a PTX JIT compilation failed";
    case CUDA_ERROR_FILE_NOT_FOUND: return "file not found";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return "part or all of the requested memory range is already mapped";
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return "pointer does not correspond to a registered memory region";
    case CUDA_ERROR_ILLEGAL_STATE: return "the operation cannot be performed in the present state";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
    case CUDA_ERROR_TIMEOUT: return "timeout occurred";
    case CUDA_ERROR_OPERATING_SYSTEM: return "OS call failed or operation not supported on this OS";
    case CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY: return "the provided execution affinity is not supported by the device";
    case CUDA_ERROR_UNKNOWN: return "unknown error";
    default: return nullptr;
  }
}

}  // namespace

GSLICE_SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorName& e : kErrorNames) {
    if (e.code == static_cast<int>(error)) {
      *out = e.name;
      return CUDA_SUCCESS;
    }
  }
  *out = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

GSLICE_SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = nullptr;
  if (cuGetErrorName(error, &name) != CUDA_SUCCESS) {
    *out = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  const char* s = ErrorString(error);
  *out = s != nullptr ? s : name;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const EntryPoint* best = nullptr;
  bool known = false;
  for (const EntryPoint& e : kEntryPoints) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    known = true;
    if (e.version <= version && (best == nullptr || e.version > best->version)) best = &e;
  }
  *pfn = nullptr;
  if (best == nullptr) {
    if (status != nullptr) {
      *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = per_thread && best->per_thread != nullptr ? best->per_thread : best->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

#undef cuGetProcAddress
GSLICE_SIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                            cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

// CUDA 13 forms that name the context instead of using the current one.
GSLICE_SIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (ctx == nullptr) ctx = CurrentContext();
  if (ctx == nullptr || !ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = static_cast<CUdevice>(ctx->ordinal);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  REQUIRE_INIT(d);
  if (ctx == nullptr) ctx = CurrentContext();
  if (ctx == nullptr || !ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  SynchronizeContext(ctx);
  TrimPoolsToThreshold();
  return static_cast<CUresult>(ctx->sticky_error.load());
}

