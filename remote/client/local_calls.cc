// The client's hand-written calls of calls.def: those answered locally (error texts, the
// context stack; the private tables are export_tables.cc) and the custom ones (entry-point lookup, launches).
#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "call.h"
#include "client_calls.h"
#include "connection.h"
#include "context_stack.h"
#include "local_calls.h"
#include "launch.h"
#include "refusals.h"
#include "log.h"

namespace gslice::remote {

void* ExportedEntry(const char* name);
void* LocalOrNotForwardedEntry(const char* name);

namespace {

using shim::Log;
using shim::LogLevel;

struct ErrorName {
  int code;
  const char* name;
};
constexpr ErrorName kErrorNames[] = {
#include "error_names.inc"
};

// ---- cuGetProcAddress: the server's driver resolves the name, the client hands out its own
// export of the symbol it resolved to. Cached per (symbol, version, flags).

struct ProcEntry {
  std::string symbol;
  int version;
  cuuint64_t flags;
  CUresult result;
  CUdriverProcAddressQueryResult status;
  void* fn;
};
pthread_mutex_t g_proc_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<ProcEntry>* g_proc_cache = nullptr;  // never freed: lookups may come during exit

bool FindProc(const char* symbol, int version, cuuint64_t flags, ProcEntry* out) {
  pthread_mutex_lock(&g_proc_mu);
  bool found = false;
  if (g_proc_cache != nullptr) {
    for (const ProcEntry& e : *g_proc_cache) {
      if (e.version == version && e.flags == flags && e.symbol == symbol) {
        *out = e;
        found = true;
        break;
      }
    }
  }
  pthread_mutex_unlock(&g_proc_mu);
  return found;
}

void RememberProc(const ProcEntry& e) {
  pthread_mutex_lock(&g_proc_mu);
  if (g_proc_cache == nullptr) g_proc_cache = new std::vector<ProcEntry>();
  if (g_proc_cache->size() < 8192) g_proc_cache->push_back(e);
  pthread_mutex_unlock(&g_proc_mu);
}

// ---- Kernel parameter layouts, from the server's cuFuncGetParamInfo, cached per function.

// Parameter sizes by function: looked up on every launch (a framework has thousands of kernels).
pthread_mutex_t g_layout_mu = PTHREAD_MUTEX_INITIALIZER;
std::unordered_map<CUfunction, std::vector<uint32_t>>* g_layouts = nullptr;

CUresult Layout(CUfunction f, std::vector<uint32_t>* sizes) {
  pthread_mutex_lock(&g_layout_mu);
  if (g_layouts != nullptr) {
    if (const auto it = g_layouts->find(f); it != g_layouts->end()) {
      sizes->assign(it->second.begin(), it->second.end());
      pthread_mutex_unlock(&g_layout_mu);
      return CUDA_SUCCESS;
    }
  }
  pthread_mutex_unlock(&g_layout_mu);
  sizes->clear();
  uint64_t total = 0;
  // A launch may name a CUkernel where a CUfunction goes (cudart 13 launches library kernels
  // that way); the server's cuFuncGetParamInfo calls it an invalid handle, its
  // cuKernelGetParamInfo lays it out.
  bool is_kernel = false;
  for (size_t i = 0; i < kMaxKernelParams; ++i) {
    size_t offset = 0, size = 0;
    CUresult r = is_kernel ? gslice_remote_call_cuKernelGetParamInfo(reinterpret_cast<CUkernel>(f), i, &offset, &size)
                           : gslice_remote_call_cuFuncGetParamInfo(f, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_HANDLE && i == 0 && !is_kernel) {
      is_kernel = true;
      r = gslice_remote_call_cuKernelGetParamInfo(reinterpret_cast<CUkernel>(f), i, &offset, &size);
    }
    if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter (or none at all)
    if (r != CUDA_SUCCESS) {
      Log(LogLevel::kWarn, "remote: cuLaunchKernel: the server cannot lay out the kernel's parameters "
          "(%s: %d)", is_kernel ? "cuKernelGetParamInfo" : "cuFuncGetParamInfo", static_cast<int>(r));
      return r;
    }
    total += size;
    if (size > kMaxParamBytes || total > kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
    sizes->push_back(static_cast<uint32_t>(size));
  }
  pthread_mutex_lock(&g_layout_mu);
  if (g_layouts == nullptr) g_layouts = new std::unordered_map<CUfunction, std::vector<uint32_t>>();
  g_layouts->emplace(f, *sizes);
  pthread_mutex_unlock(&g_layout_mu);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult ReadKernelArguments(CUfunction f, void** params, void** extra, KernelArguments* out) {
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  out->params = params;
  out->sizes.clear();
  if (params != nullptr) return Layout(f, &out->sizes);
  if (extra == nullptr) return CUDA_SUCCESS;  // a kernel without parameters: the driver decides
  bool have_size = false;
  for (size_t i = 0;; i += 2) {
    if (i >= 64) return CUDA_ERROR_INVALID_VALUE;
    if (extra[i] == CU_LAUNCH_PARAM_END) break;
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      out->buffer = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (extra[i + 1] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      size_t s;
      memcpy(&s, extra[i + 1], sizeof s);
      out->buffer_size = s;
      have_size = true;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (out->buffer == nullptr || !have_size || out->buffer_size > kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

bool EncodeKernelArguments(const KernelArguments& a, Writer* w) {
  return EncodeLaunchParams(a.params, a.sizes.data(), static_cast<uint32_t>(a.sizes.size()),
                            a.params == nullptr ? a.buffer : nullptr, a.buffer_size, w);
}

namespace {

// Sends a launch (launch.h); the worker lays the parameters out again.
CUresult Launch(uint32_t op, CUfunction f, const unsigned dims[7], CUstream stream, const CUlaunchAttribute* attrs,
                unsigned num_attrs, void** params, void** extra) {
  // Launches are not waited for: what the client can check, it checks here.
  for (int i = 0; i < 6; ++i)
    if (dims[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  if (num_attrs > kMaxLaunchAttributes || (num_attrs > 0 && attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  KernelArguments arguments;
  CUresult r = ReadKernelArguments(f, params, extra, &arguments);
  if (r != CUDA_SUCCESS) return r;
  Call call(op);
  LaunchConfig config{.f = f, .stream = stream, .num_attrs = num_attrs, .attrs = attrs};
  std::copy(dims, dims + 7, config.dims);
  EncodeLaunchConfig(config, &call.request());
  if (!EncodeKernelArguments(arguments, &call.request())) return CUDA_ERROR_INVALID_VALUE;
  const CUresult res = call.Run();
  if (res != CUDA_SUCCESS) return res;
  if (!call.reply().AtEnd()) return call.Malformed();
  return res;
}

CUresult LaunchEx(uint32_t op, const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned dims[7] = {config->gridDimX,  config->gridDimY,  config->gridDimZ,      config->blockDimX,
                            config->blockDimY, config->blockDimZ, config->sharedMemBytes};
  return Launch(op, f, dims, config->hStream, config->attrs, config->numAttrs, params, extra);
}

// Cluster occupancy: the launch configuration (launch.h), then one i32 answered.
CUresult ClusterQuery(uint32_t op, int* out, CUfunction f, const CUlaunchConfig* config) {
  if (out == nullptr || config == nullptr || config->numAttrs > kMaxLaunchAttributes ||
      (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Call call(op);
  EncodeLaunchConfig(LaunchConfig{.f = f,
                                  .dims = {config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                                           config->blockDimY, config->blockDimZ, config->sharedMemBytes},
                                  .stream = config->hStream,
                                  .num_attrs = config->numAttrs,
                                  .attrs = config->attrs},
                     &call.request());
  const CUresult res = call.Run();
  if (!call.answered()) return res;
  int32_t value = 0;
  if (!call.reply().Get(&value) || !call.reply().AtEnd()) return call.Malformed();
  if (res == CUDA_SUCCESS) *out = value;
  return res;
}

}  // namespace

void ForgetKernelLayouts() {
  pthread_mutex_lock(&g_layout_mu);
  if (g_layouts != nullptr) g_layouts->clear();
  pthread_mutex_unlock(&g_layout_mu);
}

}  // namespace gslice::remote

using namespace gslice::remote;

extern "C" CUresult gslice_remote_call_cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorName& e : kErrorNames) {
    if (e.code == static_cast<int>(error)) {
      *pStr = e.name;
      return CUDA_SUCCESS;
    }
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

// The error's name stands for its text (the driver's texts are not in its headers).
extern "C" CUresult gslice_remote_call_cuGetErrorString(CUresult error, const char** pStr) {
  return gslice_remote_call_cuGetErrorName(error, pStr);
}

// The program's own CUDA_MODULE_LOADING decides, as the driver in its process would (lazy by
// default since CUDA 12.2); the worker's driver loads what it is sent either way.
extern "C" CUresult gslice_remote_call_cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* env = getenv("CUDA_MODULE_LOADING");
  *mode = env != nullptr && strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuCtxSetCurrent(CUcontext ctx) {
  SetCurrentContext(ctx);
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = CurrentContext();
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return PushContext(ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

extern "C" CUresult gslice_remote_call_cuCtxPopCurrent_v2(CUcontext* pctx) {
  CUcontext top = CurrentContext();
  if (top == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  PopContext();
  if (pctx != nullptr) *pctx = top;
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                         cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ProcEntry e;
  if (!FindProc(symbol, cudaVersion, flags, &e)) {
    const size_t len = strnlen(symbol, kMaxString + 1);
    if (len > kMaxString) return CUDA_ERROR_INVALID_VALUE;
    Call call(kOp_cuGetProcAddress_v2);
    Writer& w = call.request();
    w.Put<uint64_t>(len);
    w.PutBytes(symbol, len);
    w.Put(cudaVersion);
    w.Put(flags);
    const CUresult res = call.Run();
    if (!call.answered()) return res;
    Reader& r = call.reply();
    int32_t status = 0;
    std::string resolved;
    if (!r.Get(&status) || !r.GetString(kMaxString, &resolved) || !r.AtEnd()) return call.Malformed();
    e = ProcEntry{.symbol = symbol, .version = cudaVersion, .flags = flags, .result = res,
                  .status = static_cast<CUdriverProcAddressQueryResult>(status), .fn = nullptr};
    if (res == CUDA_ERROR_NOT_FOUND && e.status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) {
      // The server's driver lacks the name (the simulated driver has a fraction of them): the
      // runtime, which resolves every entry point it knows at start, gets the client's export
      // of it: answered on the client when calls.def says so, else calls that fail with
      // CUDA_ERROR_NOT_SUPPORTED and a log line naming them.
      e.fn = LocalOrNotForwardedEntry(symbol);
      if (e.fn != nullptr) {
        e.result = CUDA_SUCCESS;
        e.status = CU_GET_PROC_ADDRESS_SUCCESS;
      }
    } else if (res == CUDA_SUCCESS) {
      e.fn = resolved.empty() ? nullptr : ExportedEntry(resolved.c_str());
      if (e.fn == nullptr) {
        // The server's driver has it, this client does not export it: not found here.
        gslice::shim::Log(gslice::shim::LogLevel::kInfo, "remote: cuGetProcAddress(%s): the server resolves it to '%s', which this "
                  "client does not export", symbol, resolved.c_str());
        e.result = CUDA_ERROR_NOT_FOUND;
        e.status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      }
    }
    RememberProc(e);
    gslice::shim::Log(gslice::shim::LogLevel::kDebug, "remote: cuGetProcAddress(%s, %d, %llu) -> %d (%s)", symbol,
                      cudaVersion, static_cast<unsigned long long>(flags), static_cast<int>(e.result), resolved.c_str());
  }
  *pfn = e.fn;
  if (symbolStatus != nullptr) *symbolStatus = e.status;
  return e.result;
}

extern "C" CUresult gslice_remote_call_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                      cuuint64_t flags) {
  return gslice_remote_call_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

extern "C" CUresult gslice_remote_call_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                    CUstream stream, void** params, void** extra) {
  const unsigned dims[7] = {gx, gy, gz, bx, by, bz, shmem};
  return Launch(kOp_cuLaunchKernel, f, dims, stream, nullptr, 0, params, extra);
}

extern "C" CUresult gslice_remote_call_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                         unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                         CUstream stream, void** params, void** extra) {
  const unsigned dims[7] = {gx, gy, gz, bx, by, bz, shmem};
  return Launch(kOp_cuLaunchKernel_ptsz, f, dims, stream, nullptr, 0, params, extra);
}

extern "C" CUresult gslice_remote_call_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                                      void** extra) {
  return LaunchEx(kOp_cuLaunchKernelEx, config, f, kernelParams, extra);
}

extern "C" CUresult gslice_remote_call_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                           void** kernelParams, void** extra) {
  return LaunchEx(kOp_cuLaunchKernelEx_ptsz, config, f, kernelParams, extra);
}

extern "C" CUresult gslice_remote_call_cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func,
                                                                   const CUlaunchConfig* config) {
  return ClusterQuery(kOp_cuOccupancyMaxActiveClusters, numClusters, func, config);
}

extern "C" CUresult gslice_remote_call_cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction func,
                                                                         const CUlaunchConfig* config) {
  return ClusterQuery(kOp_cuOccupancyMaxPotentialClusterSize, clusterSize, func, config);
}
