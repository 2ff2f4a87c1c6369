// Modules in the sim's own image format and kernel launches.
//
// Image format (text, NUL-terminated when passed by pointer):
//   gslice-sim-module 1
//   kernel <name> <behaviour>       behaviour: busy | fill
// Blank lines and lines starting with '#' are ignored. Behaviours and their parameters:
//   busy (uint64_t microseconds)                     keeps the device busy that long
//   fill (uint32_t* dst, uint32_t pattern, uint64_t count)  writes pattern count times
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <fstream>
#include <sstream>

#include "driver.h"

using namespace gslice::sim;

namespace {

constexpr char kImageMagic[] = "gslice-sim-module 1";

std::mutex g_modules_mu;
std::map<CUmod_st*, std::unique_ptr<CUmod_st>> g_modules;
std::set<CUfunc_st*> g_functions;

CUresult ParseImage(const std::string& text, CUmod_st* mod) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kImageMagic) return CUDA_ERROR_INVALID_IMAGE;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string keyword, name, behaviour, extra;
    words >> keyword >> name >> behaviour;
    if (keyword != "kernel" || name.empty() || (words >> extra)) return CUDA_ERROR_INVALID_IMAGE;
    auto f = std::make_unique<CUfunc_st>();
    f->module = mod;
    f->name = name;
    if (behaviour == "busy") {
      f->behaviour = CUfunc_st::Behaviour::kBusy;
    } else if (behaviour == "fill") {
      f->behaviour = CUfunc_st::Behaviour::kFill;
    } else {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    mod->functions.push_back(std::move(f));
  }
  return CUDA_SUCCESS;
}

// What the driver says about images the sim cannot run.
CUresult ClassifyForeignImage(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') return CUDA_ERROR_INVALID_IMAGE;
  uint32_t magic;
  std::memcpy(&magic, b, sizeof magic);
  if (magic == 0xBA55ED50u || magic == 0x466243B1u) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  const char* text = static_cast<const char*>(image);
  if (std::strstr(text, ".version") != nullptr || std::strstr(text, ".target") != nullptr) {
    return CUDA_ERROR_INVALID_PTX;
  }
  return CUDA_ERROR_INVALID_IMAGE;
}

CUresult LoadText(CUmodule* out, const std::string& text) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  ApiGate gate;
  auto mod = std::make_unique<CUmod_st>();
  mod->ctx = ctx;
  CUresult r = ParseImage(text, mod.get());
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(g_modules_mu);
  for (auto& f : mod->functions) g_functions.insert(f.get());
  *out = mod.get();
  g_modules[mod.get()] = std::move(mod);
  return CUDA_SUCCESS;
}

CUresult LoadImage(CUmodule* out, const void* image) {
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  const char* text = static_cast<const char*>(image);
  if (std::strncmp(text, kImageMagic, sizeof kImageMagic - 1) != 0) {
    return ClassifyForeignImage(image);
  }
  return LoadText(out, text);
}

// A kernel of a fatbin library: the sim cannot run it, and says so once per kernel.
CUresult RefuseForeign(CUfunc_st* f) {
  static std::atomic<int> reported{0};
  if (reported.fetch_add(1, std::memory_order_relaxed) < 16) {
    fprintf(stderr, "gslice sim: kernel %s is in a fatbin, which the simulated driver cannot run: "
            "CUDA_ERROR_NO_BINARY_FOR_GPU\n", f->name.c_str());
  }
  return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

// A fatbin library's kernel by name, made when first asked for (the sim does not read
// fatbins); nullptr for the sim's own modules. REQUIRES: g_modules_mu held.
CUfunc_st* AddForeignKernelLocked(CUmod_st* m, const char* name) {
  if (!m->foreign) return nullptr;
  auto f = std::make_unique<CUfunc_st>();
  f->module = m;
  f->name = name;
  f->behaviour = CUfunc_st::Behaviour::kForeign;
  CUfunc_st* raw = f.get();
  g_functions.insert(raw);
  m->functions.push_back(std::move(f));
  return raw;
}

// A fatbin library's global by name: device memory of kForeignGlobalBytes, zeroed, made when
// first asked for and freed with its library. The sim's own images have no globals.
// REQUIRES: g_modules_mu held.
constexpr size_t kForeignGlobalBytes = 64 << 10;

CUresult ForeignGlobalLocked(CUmod_st* m, const char* name, CUdeviceptr* dptr, size_t* bytes) {
  if (!m->foreign) return CUDA_ERROR_NOT_FOUND;
  CUdeviceptr p = 0;
  for (const auto& [n, at] : m->globals) {
    if (n == name) p = at;
  }
  if (p == 0) {
    CUresult r = cuMemAlloc_v2(&p, kForeignGlobalBytes);
    if (r != CUDA_SUCCESS) return r;
    m->globals.emplace_back(name, p);
  }
  if (dptr != nullptr) *dptr = p;
  if (bytes != nullptr) *bytes = kForeignGlobalBytes;
  return CUDA_SUCCESS;
}

void FreeForeignGlobalsLocked(CUmod_st* m) {
  for (const auto& g : m->globals) cuMemFree_v2(g.second);
  m->globals.clear();
}

bool FunctionLive(CUfunction f) {
  std::lock_guard<std::mutex> g(g_modules_mu);
  return g_functions.count(f) != 0;
}

struct KernelArgs {
  uint64_t a = 0;  // busy: microseconds; fill: dst
  uint32_t pattern = 0;
  uint64_t count = 0;
};

// The sim's CUPTI (sim/cupti) subscribes here: nullptr while nothing records.
std::atomic<GsliceSimKernelSink> g_activity_sink{nullptr};
std::atomic<uint32_t> g_correlation{0};

void ReportKernel(const std::string& name, CUctx_st* ctx, unsigned long long stream, uint64_t start, uint64_t end,
                  uint32_t correlation) {
  auto sink = g_activity_sink.load(std::memory_order_acquire);
  if (sink == nullptr) return;
  const GsliceSimKernelActivity a{.name = name.c_str(), .start_ns = start, .end_ns = end, .device = ctx->ordinal,
                                  .context_id = ctx->serial, .stream_id = static_cast<uint32_t>(stream),
                                  .correlation_id = correlation};
  sink(&a);
}

CUresult ReadArgs(const CUfunc_st* f, void** params, void** extra, KernelArgs* out) {
  if ((params == nullptr) == (extra == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  const bool fill = f->behaviour == CUfunc_st::Behaviour::kFill;
  if (params != nullptr) {
    if (params[0] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(&out->a, params[0], sizeof out->a);
    if (fill) {
      if (params[1] == nullptr || params[2] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(&out->pattern, params[1], sizeof out->pattern);
      std::memcpy(&out->count, params[2], sizeof out->count);
    }
    return CUDA_SUCCESS;
  }
  // extra: CU_LAUNCH_PARAM_BUFFER_POINTER, p, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, END;
  // arguments laid out as the compiler lays out the parameter struct.
  const char* buf = nullptr;
  size_t size = 0;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buf = static_cast<const char*>(extra[i + 1]);
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      std::memcpy(&size, extra[i + 1], sizeof size);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (buf == nullptr || size < (fill ? 24u : 8u)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(&out->a, buf, 8);
  if (fill) {
    std::memcpy(&out->pattern, buf + 8, 4);
    std::memcpy(&out->count, buf + 16, 8);
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult gslice::sim::CheckLaunch(CUfunction f, const unsigned dims[7]) {
  const unsigned gx = dims[0], gy = dims[1], gz = dims[2], bx = dims[3], by = dims[4], bz = dims[5], shmem = dims[6];
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gy > 65535 ||
      gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
      static_cast<uint64_t>(bx) * by * bz > 1024 || shmem > 232448) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult gslice::sim::MakeKernelWork(CUctx_st* target, CUfunction f, void** params, void** extra, int priority,
                                     unsigned long long stream_id, std::function<void()>* work) {
  if (f->behaviour == CUfunc_st::Behaviour::kForeign) return RefuseForeign(f);
  KernelArgs args;
  CUresult r = ReadArgs(f, params, extra, &args);
  if (r != CUDA_SUCCESS) return r;
  const auto behaviour = f->behaviour;
  const uint32_t correlation = g_correlation.fetch_add(1, std::memory_order_relaxed) + 1;
  *work = [target, priority, behaviour, args, name = f->name, stream_id, correlation] {
    if (target->sticky_error.load() != CUDA_SUCCESS) return;  // a faulted context runs nothing
    if (behaviour == CUfunc_st::Behaviour::kBusy) {
      const uint64_t start = RunOnDevice(target, priority, args.a * 1000, nullptr);
      ReportKernel(name, target, stream_id, start, gslice::MonotonicNs(), correlation);
      return;
    }
    if (args.count > (1ull << 40) || !DeviceRangeValid(args.a, args.count * 4) || args.a % 4 != 0) {
      // The kernel would fault on a real GPU: the context is lost.
      target->sticky_error.store(CUDA_ERROR_ILLEGAL_ADDRESS);
      return;
    }
    const uint64_t start = RunOnDevice(target, priority, 0, [&args] {
      auto* p = reinterpret_cast<uint32_t*>(args.a);
      for (uint64_t i = 0; i < args.count; ++i) p[i] = args.pattern;
    });
    ReportKernel(name, target, stream_id, start, gslice::MonotonicNs(), correlation);
  };
  return CUDA_SUCCESS;
}

namespace {

CUresult Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shmem, CUstream h, void** params, void** extra, bool pt,
                const int* priority_override) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  const unsigned dims[7] = {gx, gy, gz, bx, by, bz, shmem};
  CUresult r = CheckLaunch(f, dims);
  if (r != CUDA_SUCCESS) return r;
  std::shared_ptr<CUstream_st> s;
  r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  const int priority = priority_override != nullptr ? *priority_override : s->priority.load();
  std::function<void()> work;
  r = MakeKernelWork(s->ctx, f, params, extra, priority, s->id, &work);
  if (r != CUDA_SUCCESS) return r;
  if (CUresult sticky = static_cast<CUresult>(s->ctx->sticky_error.load()); sticky != CUDA_SUCCESS) {
    return sticky;
  }
  ApiGate gate;
  static const bool trace = [] {
    const char* v = getenv("GSLICE_SIM_TRACE_LAUNCHES");
    return v != nullptr && strcmp(v, "1") == 0;
  }();
  if (trace) {
    const char* kind = s->kind == StreamKind::kLegacy ? "legacy" : s->kind == StreamKind::kPerThread ? "per-thread" : "user";
    fprintf(stderr, "gslice sim: launch %s stream=%s priority=%d\n", f->name.c_str(), kind, priority);
  }
  Enqueue(s, std::move(work));
  return CUDA_SUCCESS;
}

CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, bool pt) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (config->numAttrs > 0 && config->attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int* priority = nullptr;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PRIORITY) priority = &config->attrs[i].value.priority;
  }
  int clamped = 0;
  if (priority != nullptr) {
    clamped = *priority;
    if (clamped > kLeastStreamPriority) clamped = kLeastStreamPriority;
    if (clamped < kGreatestStreamPriority) clamped = kGreatestStreamPriority;
    priority = &clamped;
  }
  return Launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                params, extra, pt, priority);
}

}  // namespace

// The sim's GPU activity hook (driver.h, GsliceSimKernelActivity): the sim's libcupti.so
// subscribes while it records (sink) and unsubscribes with nullptr. Not a CUDA function.
GSLICE_SIM_EXPORT void gsliceSimSubscribeKernelActivity(GsliceSimKernelSink sink) {
  g_activity_sink.store(sink, std::memory_order_release);
}

void gslice::sim::ResetKernelLocksAfterFork() { new (&g_modules_mu) std::mutex(); }

GSLICE_SIM_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return LoadImage(module, image);
}

GSLICE_SIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n,
                                              CUjit_option* options, void** values) {
  if (n > 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return LoadImage(module, image);  // JIT options mean nothing to the sim
}

GSLICE_SIM_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* path) {
  if (module == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() < 4) return CUDA_ERROR_INVALID_IMAGE;
  return LoadImage(module, text.c_str());
}

GSLICE_SIM_EXPORT CUresult cuModuleUnload(CUmodule module) {
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_modules_mu);
  auto it = g_modules.find(module);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : it->second->functions) g_functions.erase(f.get());
  FreeForeignGlobalsLocked(it->second.get());
  g_modules.erase(it);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuModuleGetFunction(CUfunction* out, CUmodule module, const char* name) {
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_modules_mu);
  auto it = g_modules.find(module);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : it->second->functions) {
    if (f->name == name) {
      *out = f.get();
      return CUDA_SUCCESS;
    }
  }
  CUfunc_st* f = AddForeignKernelLocked(it->second.get(), name);
  if (f == nullptr) return CUDA_ERROR_NOT_FOUND;
  *out = f;
  return CUDA_SUCCESS;
}

// A module's functions: the sim's own images' kernels; a fatbin library's, those asked for by
// name so far (the sim does not read fatbins).
GSLICE_SIM_EXPORT CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule module) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_modules_mu);
  auto it = g_modules.find(module);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(it->second->functions.size());
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int n, CUmodule module) {
  if (functions == nullptr && n > 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_modules_mu);
  auto it = g_modules.find(module);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (unsigned i = 0; i < n && i < it->second->functions.size(); ++i) functions[i] = it->second->functions[i].get();
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                          CUstream h, void** params, void** extra) {
  return Launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, extra, false, nullptr);
}

GSLICE_SIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                               unsigned bx, unsigned by, unsigned bz,
                                               unsigned shmem, CUstream h, void** params,
                                               void** extra) {
  return Launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, extra, true, nullptr);
}

GSLICE_SIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                            void** params, void** extra) {
  return LaunchEx(config, f, params, extra, false);
}

GSLICE_SIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                 void** params, void** extra) {
  return LaunchEx(config, f, params, extra, true);
}

GSLICE_SIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy,
                                                     unsigned gz, unsigned bx, unsigned by,
                                                     unsigned bz, unsigned shmem, CUstream h,
                                                     void** params) {
  return Launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, nullptr, false, nullptr);
}

GSLICE_SIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                          unsigned gz, unsigned bx, unsigned by,
                                                          unsigned bz, unsigned shmem, CUstream h,
                                                          void** params) {
  return Launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, nullptr, true, nullptr);
}

GSLICE_SIM_EXPORT CUresult cuFuncGetName(const char** name, CUfunction f) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();  // lives as long as its module, like the driver's
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction f) {
  if (pi == nullptr || attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 16; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared.load(); break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout.load(); break;
    default: *pi = 0; break;
  }
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice) {
  return cuFuncGetAttribute(pi, attrib, reinterpret_cast<CUfunction>(kernel));
}

GSLICE_SIM_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel kernel, CUdevice) {
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(kernel), attrib, value);
}

// Occupancy as the simulated device's limits give it (2048 threads and 228 KiB of shared
// memory per multiprocessor, 48 KiB of dynamic shared memory per block by default).
GSLICE_SIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num_blocks, CUfunction f,
                                                                               int block_size, size_t smem,
                                                                               unsigned int) {
  REQUIRE_INIT(d);
  if (num_blocks == nullptr || block_size <= 0 || block_size > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  int blocks = 2048 / block_size;
  if (smem > 0 && static_cast<int>(233472 / smem) < blocks) blocks = static_cast<int>(233472 / smem);
  *num_blocks = blocks < 32 ? blocks : 32;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, CUfunction f, int block_size,
                                                                       size_t smem) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks, f, block_size, smem, 0);
}

GSLICE_SIM_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* smem, CUfunction f, int num_blocks,
                                                                   int block_size) {
  REQUIRE_INIT(d);
  if (smem == nullptr || num_blocks <= 0 || block_size <= 0 || block_size > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  *smem = 49152;
  return CUDA_SUCCESS;
}

// Clusters of up to 8 blocks (the portable limit), as many as the device's multiprocessors
// hold at once.
GSLICE_SIM_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int* size, CUfunction f, const CUlaunchConfig* config) {
  REQUIRE_INIT(d);
  if (size == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  *size = 8;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuOccupancyMaxActiveClusters(int* count, CUfunction f, const CUlaunchConfig* config) {
  REQUIRE_INIT(d);
  if (count == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  unsigned cluster = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& c = config->attrs[i].value.clusterDim;
      cluster = c.x * c.y * c.z;
    }
  }
  if (cluster == 0 || cluster > 16) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  *count = static_cast<int>(132 / cluster);
  return CUDA_SUCCESS;
}

namespace {

// The parameter layout of the sim's kernels, as the compiler lays out their C signatures:
// busy(uint64_t), fill(uint32_t*, uint32_t, uint64_t).
CUresult ParamInfo(const CUfunc_st* f, size_t index, size_t* offset, size_t* size) {
  static constexpr size_t kBusy[][2] = {{0, 8}};
  static constexpr size_t kFill[][2] = {{0, 8}, {8, 4}, {16, 8}};
  const bool fill = f->behaviour == CUfunc_st::Behaviour::kFill;
  const size_t count = fill ? 3 : 1;
  if (index >= count) return CUDA_ERROR_INVALID_VALUE;
  const size_t* entry = fill ? kFill[index] : kBusy[index];
  if (offset != nullptr) *offset = entry[0];
  if (size != nullptr) *size = entry[1];
  return CUDA_SUCCESS;
}

}  // namespace

GSLICE_SIM_EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  REQUIRE_INIT(d);
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (f->behaviour == CUfunc_st::Behaviour::kForeign) return RefuseForeign(f);
  return ParamInfo(f, index, offset, size);
}

GSLICE_SIM_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  REQUIRE_INIT(d);
  auto* f = reinterpret_cast<CUfunction>(kernel);
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (f->behaviour == CUfunc_st::Behaviour::kForeign) return RefuseForeign(f);
  return ParamInfo(f, index, offset, size);
}

// ---- libraries: context-independent modules; a CUkernel is the kernel's function ----

namespace {

std::set<CUmod_st*> g_libraries;

CUresult LoadLibrary(CUlibrary* out, const void* image, unsigned num_jit, CUjit_option* jit,
                     void** jit_values, unsigned num_lib, CUlibraryOption* lib_options,
                     void** lib_values) {
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((num_jit > 0 && (jit == nullptr || jit_values == nullptr)) ||
      (num_lib > 0 && (lib_options == nullptr || lib_values == nullptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  REQUIRE_INIT(d);
  const char* text = static_cast<const char*>(image);
  auto mod = std::make_unique<CUmod_st>();
  if (std::strncmp(text, kImageMagic, sizeof kImageMagic - 1) != 0) {
    // A fatbin library (how cudart and the CUDA libraries register their kernels) is held so
    // that the program starts; its kernels are found by name and refused when launched.
    CUresult r = ClassifyForeignImage(image);
    if (r != CUDA_ERROR_NO_BINARY_FOR_GPU) return r;
    mod->foreign = true;
  } else {
    CUresult r = ParseImage(text, mod.get());
    if (r != CUDA_SUCCESS) return r;
  }
  std::lock_guard<std::mutex> g(g_modules_mu);
  for (auto& f : mod->functions) g_functions.insert(f.get());
  g_libraries.insert(mod.get());
  *out = reinterpret_cast<CUlibrary>(mod.get());
  g_modules[mod.get()] = std::move(mod);
  return CUDA_SUCCESS;
}

CUmod_st* FindLibraryLocked(CUlibrary lib) {
  auto* m = reinterpret_cast<CUmod_st*>(lib);
  return g_libraries.count(m) != 0 ? m : nullptr;
}

}  // namespace

GSLICE_SIM_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code,
                                             CUjit_option* jit, void** jit_values,
                                             unsigned int num_jit, CUlibraryOption* options,
                                             void** option_values, unsigned int num_options) {
  return LoadLibrary(library, code, num_jit, jit, jit_values, num_options, options, option_values);
}

GSLICE_SIM_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path,
                                                 CUjit_option* jit, void** jit_values,
                                                 unsigned int num_jit, CUlibraryOption* options,
                                                 void** option_values, unsigned int num_options) {
  if (library == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() < 4) return CUDA_ERROR_INVALID_IMAGE;
  return LoadLibrary(library, text.c_str(), num_jit, jit, jit_values, num_options, options,
                     option_values);
}

GSLICE_SIM_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_modules_mu);
  CUmod_st* m = FindLibraryLocked(library);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : m->functions) g_functions.erase(f.get());
  FreeForeignGlobalsLocked(m);
  g_libraries.erase(m);
  g_modules.erase(m);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  if (kernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_modules_mu);
  CUmod_st* m = FindLibraryLocked(library);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : m->functions) {
    if (f->name == name) {
      *kernel = reinterpret_cast<CUkernel>(f.get());
      return CUDA_SUCCESS;
    }
  }
  CUfunc_st* f = AddForeignKernelLocked(m, name);
  if (f == nullptr) return CUDA_ERROR_NOT_FOUND;
  *kernel = reinterpret_cast<CUkernel>(f);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(g_modules_mu);
  CUmod_st* m = FindLibraryLocked(library);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return ForeignGlobalLocked(m, name, dptr, bytes);
}

GSLICE_SIM_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule module, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(g_modules_mu);
  auto it = g_modules.find(module);
  if (it == g_modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  return ForeignGlobalLocked(it->second.get(), name, dptr, bytes);
}

GSLICE_SIM_EXPORT CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(g_modules_mu);
  CUmod_st* m = FindLibraryLocked(library);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *module = m;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  auto* f = reinterpret_cast<CUfunction>(kernel);
  if (!FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  *function = f;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  auto* f = reinterpret_cast<CUfunction>(kernel);
  if (!FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}

// ---- function settings: accepted, checked and remembered (cuFuncGetAttribute answers them);
// they change nothing else (the sim's kernels use no shared memory). ----

GSLICE_SIM_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attrib, int value) {
  REQUIRE_INIT(d);
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0 || value > 232448) return CUDA_ERROR_INVALID_VALUE;
      f->max_dynamic_shared = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      f->carveout = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return value >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

GSLICE_SIM_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  REQUIRE_INIT(d);
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  return config >= CU_FUNC_CACHE_PREFER_NONE && config <= CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_SUCCESS
                                                                                     : CUDA_ERROR_INVALID_VALUE;
}

GSLICE_SIM_EXPORT CUresult cuFuncGetModule(CUmodule* module, CUfunction f) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (f == nullptr || !FunctionLive(f)) return CUDA_ERROR_INVALID_HANDLE;
  *module = f->module;
  return CUDA_SUCCESS;
}

