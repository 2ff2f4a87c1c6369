// gslice_interpose_client: a CUDA driver-API program the interposer tests start under the
// shim (LD_PRELOAD) on the simulated or real driver. It reaches the driver the way cudart
// does: dlopen("libcuda.so.1") (which returns the preloaded shim) and dlsym /
// cuGetProcAddress. Each mode checks its own results and exits non-zero with a message
// when one is wrong.
//
//   client paths KIND     KIND: linear pitch managed async pool vmm array array3d mipmapped graph
//   client info           prints "total=N free=N devtotal=N"
//   client hold BYTES     allocates, prints "ok" or "oom", waits for stdin to close, frees
//   client churn SEED     allocates and frees at random until killed
//   client watch          prints "ready", then answers commands read from stdin, one a line,
//                         until stdin closes: "info" prints "total=N free=N nvml=N" (the
//                         slice as cuMemGetInfo and NVML, on CUDA device 0, show it now), "alloc BYTES"
//                         allocates and keeps it ("ok" or "oom"), "free" frees what it holds
//                         ("freed")
//   client init           cuInit + context + one allocation; prints the microseconds it took
//   client procaddress    cuGetProcAddress (both versions, every stream flag) returns hooks
//   client forkexit       a forked child's normal exit leaves the parent's usage alone
//   client nvml           prints "total=N used=N free=N" of NVML device 0 (v1 and v2 agree)
//   client contexts THREADS  retains the primary context, then THREADS threads at once each
//                         create a context (cuCtxCreate, _v2, _v3, _v4 in turn); prints
//                         "contexts primary=ok|oom ok=N oom=M", holds them until stdin
//                         closes, destroys them and prints "contexts done"
//   client gatecheck NAMES UNGATED   every function NAMES lists (the shim's exports, one a
//                         line) and every pointer cuGetProcAddress hands out for them passes
//                         the resume gate, except exactly the functions the UNGATED .def
//                         file names; prints "gatecheck ok ..."
//   client allocbench N BYTES   N cuMemAlloc+cuMemFree pairs through the hooks and N through
//                         the real driver, alternating; prints "hook=NS real=NS diff=NS" (medians)
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "gslice/clock.h"
#include "gslice/nvml_subset.h"

namespace {

void* g_cuda = nullptr;

[[noreturn]] void Die(const char* what, long v = 0) {
  fprintf(stderr, "client: FAILED: %s (%ld)\n", what, v);
  exit(1);
}

template <typename F>
F Sym(void* h, const char* name) {
  void* p = dlsym(h, name);
  if (p == nullptr) {
    fprintf(stderr, "client: no symbol %s\n", name);
    exit(1);
  }
  return reinterpret_cast<F>(p);
}

#define FN(name) static auto name = Sym<decltype(&::name)>(g_cuda, #name)
#define CK(call)                                     \
  do {                                               \
    CUresult r_ = (call);                            \
    if (r_ != CUDA_SUCCESS) Die(#call, r_);          \
  } while (0)

CUcontext g_ctx = nullptr;
CUdevice g_dev = 0;

void Setup() {
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (g_cuda == nullptr) Die("dlopen libcuda.so.1");
  FN(cuInit);
  FN(cuDeviceGet);
  FN(cuDevicePrimaryCtxRetain);
  FN(cuCtxSetCurrent);
  CK(cuInit(0));
  CK(cuDeviceGet(&g_dev, 0));
  CK(cuDevicePrimaryCtxRetain(&g_ctx, g_dev));
  CK(cuCtxSetCurrent(g_ctx));
}

void Info(size_t* free_b, size_t* total_b) {
  FN(cuMemGetInfo_v2);
  CK(cuMemGetInfo_v2(free_b, total_b));
}

// One allocation path: Alloc returns CUDA_SUCCESS or an error, Free releases.
struct Path {
  virtual ~Path() = default;
  virtual CUresult Alloc(size_t bytes, uint64_t* handle) = 0;
  virtual void Free(uint64_t handle) = 0;
};

struct Linear : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuMemAlloc_v2);
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, bytes);
    *h = p;
    return r;
  }
  void Free(uint64_t h) override {
    FN(cuMemFree_v2);
    CK(cuMemFree_v2(h));
  }
};

struct Pitch : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuMemAllocPitch_v2);
    CUdeviceptr p = 0;
    size_t pitch = 0;
    CUresult r = cuMemAllocPitch_v2(&p, &pitch, 4096, bytes / 4096, 4);
    *h = p;
    return r;
  }
  void Free(uint64_t h) override { Linear().Free(h); }
};

struct Managed : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuMemAllocManaged);
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL);
    *h = p;
    return r;
  }
  void Free(uint64_t h) override { Linear().Free(h); }
};

struct Async : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuMemAllocAsync);
    FN(cuStreamSynchronize);
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocAsync(&p, bytes, nullptr);
    if (r == CUDA_SUCCESS) CK(cuStreamSynchronize(nullptr));
    *h = p;
    return r;
  }
  void Free(uint64_t h) override {
    FN(cuMemFreeAsync);
    FN(cuStreamSynchronize);
    CK(cuMemFreeAsync(h, nullptr));
    CK(cuStreamSynchronize(nullptr));
  }
};

struct Pool : Path {
  CUmemoryPool pool = nullptr;
  Pool() {
    FN(cuMemPoolCreate);
    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = g_dev;
    CK(cuMemPoolCreate(&pool, &props));
  }
  ~Pool() override {
    FN(cuMemPoolDestroy);
    cuMemPoolDestroy(pool);
  }
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuMemAllocFromPoolAsync);
    FN(cuStreamSynchronize);
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocFromPoolAsync(&p, bytes, pool, nullptr);
    if (r == CUDA_SUCCESS) CK(cuStreamSynchronize(nullptr));
    *h = p;
    return r;
  }
  void Free(uint64_t h) override { Async().Free(h); }
};

struct Vmm : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuMemCreate);
    FN(cuMemGetAllocationGranularity);
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_dev;
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = gran == 0 ? bytes : (bytes + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle handle = 0;
    CUresult r = cuMemCreate(&handle, size, &prop, 0);
    *h = handle;
    return r;
  }
  void Free(uint64_t h) override {
    FN(cuMemRelease);
    CK(cuMemRelease(h));
  }
};

struct Array2D : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuArrayCreate_v2);
    CUDA_ARRAY_DESCRIPTOR d = {};
    d.Width = 4096;
    d.Height = bytes / (4096 * 4);
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    CUarray a = nullptr;
    CUresult r = cuArrayCreate_v2(&a, &d);
    *h = reinterpret_cast<uint64_t>(a);
    return r;
  }
  void Free(uint64_t h) override {
    FN(cuArrayDestroy);
    CK(cuArrayDestroy(reinterpret_cast<CUarray>(h)));
  }
};

struct Array3D : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuArray3DCreate_v2);
    CUDA_ARRAY3D_DESCRIPTOR d = {};
    d.Width = 256;
    d.Height = 256;
    d.Depth = bytes / (256 * 256 * 4);
    d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
    d.NumChannels = 4;
    CUarray a = nullptr;
    CUresult r = cuArray3DCreate_v2(&a, &d);
    *h = reinterpret_cast<uint64_t>(a);
    return r;
  }
  void Free(uint64_t h) override { Array2D().Free(h); }
};

struct Mipmapped : Path {
  CUresult Alloc(size_t bytes, uint64_t* h) override {
    FN(cuMipmappedArrayCreate);
    // Level 0 takes 3/4 of the total, the rest of the chain about a quarter.
    CUDA_ARRAY3D_DESCRIPTOR d = {};
    d.Width = 2048;
    d.Height = bytes * 3 / 4 / (2048 * 4);
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    CUmipmappedArray a = nullptr;
    CUresult r = cuMipmappedArrayCreate(&a, &d, 4);
    *h = reinterpret_cast<uint64_t>(a);
    return r;
  }
  void Free(uint64_t h) override {
    FN(cuMipmappedArrayDestroy);
    CK(cuMipmappedArrayDestroy(reinterpret_cast<CUmipmappedArray>(h)));
  }
};

// Graph memory: a memory-allocation node that would not fit in the slice is refused when
// it is added (the memory itself is reserved when the graph runs, and charged then).
// Works without graph support in the driver: the refusal comes before the driver is asked.
int GraphPath() {
  FN(cuGraphCreate);
  FN(cuGraphAddMemAllocNode);
  FN(cuGraphDestroy);
  CUgraph g = nullptr;
  CUresult created = cuGraphCreate(&g, 0);  // a driver without graphs leaves g null
  auto add = [&](size_t bytes) {
    CUDA_MEM_ALLOC_NODE_PARAMS p = {};
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = g_dev;
    p.bytesize = bytes;
    CUgraphNode node = nullptr;
    return cuGraphAddMemAllocNode(&node, g, nullptr, 0, &p);
  };
  const size_t chunk = 40ull << 20;
  uint64_t held = 0;
  CK(Linear().Alloc(chunk, &held));
  CUresult r = add(chunk);
  if (r != CUDA_ERROR_OUT_OF_MEMORY) Die("graph memory node past the limit not refused", r);
  Linear().Free(held);
  r = add(chunk);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) Die("graph memory node refused although it fits", r);
  if (created == CUDA_SUCCESS && r != CUDA_SUCCESS) Die("graph memory node failed", r);
  if (created == CUDA_SUCCESS) cuGraphDestroy(g);
  printf("graph ok\n");
  return 0;
}

int Paths(const std::string& kind) {
  Setup();
  Path* path = nullptr;
  if (kind == "linear") path = new Linear;
  else if (kind == "pitch") path = new Pitch;
  else if (kind == "managed") path = new Managed;
  else if (kind == "async") path = new Async;
  else if (kind == "pool") path = new Pool;
  else if (kind == "vmm") path = new Vmm;
  else if (kind == "array") path = new Array2D;
  else if (kind == "array3d") path = new Array3D;
  else if (kind == "mipmapped") path = new Mipmapped;
  else if (kind == "graph") return GraphPath();
  else Die("unknown path kind");
  size_t free0 = 0, total = 0;
  Info(&free0, &total);
  const size_t limit = total;
  const size_t chunk = 40ull << 20;  // the tests use a 64 MiB limit
  if (limit != 64ull << 20) Die("cuMemGetInfo total is not the 64 MiB limit", static_cast<long>(limit));
  uint64_t a = 0, b = 0;
  CK(path->Alloc(chunk, &a));
  size_t free1 = 0;
  Info(&free1, &total);
  if (free0 - free1 < chunk / 100 * 95) Die("allocation not counted in cuMemGetInfo", static_cast<long>(free0 - free1));
  CUresult r = path->Alloc(chunk, &b);
  if (r != CUDA_ERROR_OUT_OF_MEMORY) Die("allocation past the limit not refused with CUDA_ERROR_OUT_OF_MEMORY", r);
  size_t free2 = 0;
  Info(&free2, &total);
  if (free2 != free1) Die("a refused allocation changed the usage", static_cast<long>(free1 - free2));
  path->Free(a);
  size_t free3 = 0;
  Info(&free3, &total);
  if (free3 != free0) Die("free did not give the bytes back", static_cast<long>(free0 - free3));
  CK(path->Alloc(chunk, &b));  // free + retry works
  path->Free(b);
  delete path;
  printf("%s ok\n", kind.c_str());
  return 0;
}

int InfoMode() {
  Setup();
  size_t f = 0, t = 0, dt = 0;
  Info(&f, &t);
  FN(cuDeviceTotalMem_v2);
  CK(cuDeviceTotalMem_v2(&dt, g_dev));
  printf("total=%zu free=%zu devtotal=%zu\n", t, f, dt);
  return 0;
}

int Hold(size_t bytes) {
  Setup();
  FN(cuMemAlloc_v2);
  FN(cuMemFree_v2);
  CUdeviceptr p = 0;
  CUresult r = cuMemAlloc_v2(&p, bytes);
  printf("%s\n", r == CUDA_SUCCESS ? "ok" : r == CUDA_ERROR_OUT_OF_MEMORY ? "oom" : "error");
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  if (r == CUDA_SUCCESS) CK(cuMemFree_v2(p));
  return r == CUDA_SUCCESS || r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}

// A program that runs on while its slice changes: each "info" reads the limit afresh.
int Watch() {
  Setup();
  FN(cuMemAlloc_v2);
  FN(cuMemFree_v2);
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (h == nullptr) Die("dlopen libnvidia-ml.so.1");
  auto init = Sym<nvmlReturn_t (*)()>(h, "nvmlInit_v2");
  auto by_uuid = Sym<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(h, "nvmlDeviceGetHandleByUUID");
  auto mem = Sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(h, "nvmlDeviceGetMemoryInfo");
  if (init() != NVML_SUCCESS) Die("nvmlInit_v2");
  // NVML numbers every GPU of the node (CUDA_VISIBLE_DEVICES does not apply): find CUDA
  // device 0 by its UUID.
  FN(cuDeviceGetUuid);
  CUuuid id;
  CK(cuDeviceGetUuid(&id, g_dev));
  char uuid[64];
  const unsigned char* b = reinterpret_cast<const unsigned char*>(id.bytes);
  snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  nvmlDevice_t dev = nullptr;
  if (by_uuid(uuid, &dev) != NVML_SUCCESS) Die("nvmlDeviceGetHandleByUUID");
  std::vector<CUdeviceptr> held;
  printf("ready\n");
  fflush(stdout);
  char line[128];
  while (fgets(line, sizeof line, stdin) != nullptr) {
    if (strncmp(line, "info", 4) == 0) {
      size_t f = 0, t = 0;
      Info(&f, &t);
      nvmlMemory_t m = {};
      if (mem(dev, &m) != NVML_SUCCESS) Die("nvmlDeviceGetMemoryInfo");
      printf("total=%zu free=%zu nvml=%llu\n", t, f, m.total);
    } else if (strncmp(line, "alloc ", 6) == 0) {
      CUdeviceptr p = 0;
      CUresult r = cuMemAlloc_v2(&p, strtoull(line + 6, nullptr, 10));
      if (r == CUDA_SUCCESS) held.push_back(p);
      printf("%s\n", r == CUDA_SUCCESS ? "ok" : r == CUDA_ERROR_OUT_OF_MEMORY ? "oom" : "error");
    } else if (strncmp(line, "free", 4) == 0) {
      for (CUdeviceptr p : held) CK(cuMemFree_v2(p));
      held.clear();
      printf("freed\n");
    } else {
      printf("unknown command\n");
    }
    fflush(stdout);
  }
  for (CUdeviceptr p : held) CK(cuMemFree_v2(p));
  return 0;
}

int Churn(unsigned seed) {
  Setup();
  srand(seed);
  Linear linear;
  Async async;
  Vmm vmm;
  Path* paths[] = {&linear, &async, &vmm};
  struct Live {
    Path* path;
    uint64_t h;
  };
  std::vector<Live> live;
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    if (live.size() < 8 && (rand() % 2 == 0 || live.empty())) {
      Path* p = paths[rand() % 3];
      uint64_t h = 0;
      size_t bytes = (1 + static_cast<size_t>(rand() % 8)) << 20;
      CUresult r = p->Alloc(bytes, &h);
      if (r == CUDA_SUCCESS) live.push_back({p, h});
      else if (r != CUDA_ERROR_OUT_OF_MEMORY) Die("churn alloc", r);
    } else {
      size_t i = static_cast<size_t>(rand()) % live.size();
      live[i].path->Free(live[i].h);
      live.erase(live.begin() + static_cast<long>(i));
    }
  }
}

int Init() {
  int64_t t0 = gslice::MonotonicNs();
  Setup();
  FN(cuMemAlloc_v2);
  FN(cuMemFree_v2);
  CUdeviceptr p = 0;
  CK(cuMemAlloc_v2(&p, 1 << 20));
  CK(cuMemFree_v2(p));
  int64_t t1 = gslice::MonotonicNs();
  printf("%lld\n", static_cast<long long>((t1 - t0) / 1000));
  return 0;
}

int ProcAddress() {
  Setup();
  FN(cuGetProcAddress_v2);
  auto get_v1 = Sym<CUresult (*)(const char*, void**, int, cuuint64_t)>(g_cuda, "cuGetProcAddress");
  // The real driver's own entry points: the shim must never hand these out for hooked names.
  const char* real_path = getenv("GSLICE_REAL_DRIVER");
  void* real = real_path != nullptr ? dlopen(real_path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (real == nullptr) Die("real driver not loaded (GSLICE_REAL_DRIVER)");
  struct Case {
    const char* symbol;
    const char* real_name_default;
    const char* real_name_ptds;
  } cases[] = {
      {"cuMemAlloc", "cuMemAlloc_v2", "cuMemAlloc_v2"},
      {"cuMemGetInfo", "cuMemGetInfo_v2", "cuMemGetInfo_v2"},
      {"cuMemAllocAsync", "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
      {"cuMemFreeAsync", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
      {"cuMemCreate", "cuMemCreate", "cuMemCreate"},
      {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetProcAddress_v2"},
  };
  const cuuint64_t flags[] = {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
  const int versions[] = {12000, 12080, 13000};
  int checked = 0;
  for (const Case& c : cases) {
    for (cuuint64_t f : flags) {
      for (int v : versions) {
        for (int api = 1; api <= 2; ++api) {
          void* p = nullptr;
          CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
          CUresult r = api == 1 ? get_v1(c.symbol, &p, v, f) : cuGetProcAddress_v2(c.symbol, &p, v, f, &status);
          if (r != CUDA_SUCCESS || p == nullptr) {
            fprintf(stderr, "cuGetProcAddress%s(%s, %d, %llu) failed: %d\n", api == 2 ? "_v2" : "", c.symbol, v,
                    static_cast<unsigned long long>(f), r);
            Die("cuGetProcAddress");
          }
          const char* rn = f == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? c.real_name_ptds : c.real_name_default;
          void* real_fn = dlsym(real, rn);
          void* real_plain = dlsym(real, c.real_name_default);
          if (p == real_fn || p == real_plain) {
            fprintf(stderr, "cuGetProcAddress(%s, %d, flags %llu) returned the real driver's %s\n", c.symbol, v,
                    static_cast<unsigned long long>(f), rn);
            Die("unhooked entry point");
          }
          ++checked;
        }
      }
    }
  }
  // A pointer handed out must behave as the hook: an allocation past the limit is refused.
  void* p = nullptr;
  CK(cuGetProcAddress_v2("cuMemAlloc", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(p);
  CUdeviceptr d = 0;
  size_t f = 0, t = 0;
  Info(&f, &t);
  if (alloc(&d, t + (1 << 20)) != CUDA_ERROR_OUT_OF_MEMORY) Die("cuGetProcAddress's cuMemAlloc is not limited");
  CK(cuGetProcAddress_v2("cuMemAllocAsync", &p, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  auto alloc_async = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t, CUstream)>(p);
  if (alloc_async(&d, t + (1 << 20), nullptr) != CUDA_ERROR_OUT_OF_MEMORY) Die("per-thread cuMemAllocAsync is not limited");
  printf("procaddress ok (%d lookups)\n", checked);
  return 0;
}

int Nvml() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (h == nullptr) Die("dlopen libnvidia-ml.so.1");
  auto init = Sym<nvmlReturn_t (*)()>(h, "nvmlInit_v2");
  auto get = Sym<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(h, "nvmlDeviceGetHandleByIndex_v2");
  auto mem1 = Sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(h, "nvmlDeviceGetMemoryInfo");
  auto mem2 = Sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(h, "nvmlDeviceGetMemoryInfo_v2");
  if (init() != NVML_SUCCESS) Die("nvmlInit_v2");
  nvmlDevice_t dev = nullptr;
  if (get(0, &dev) != NVML_SUCCESS) Die("nvmlDeviceGetHandleByIndex_v2");
  nvmlMemory_t m1 = {};
  nvmlMemory_v2_t m2 = {};
  m2.version = nvmlMemory_v2;
  if (mem1(dev, &m1) != NVML_SUCCESS) Die("nvmlDeviceGetMemoryInfo");
  if (mem2(dev, &m2) != NVML_SUCCESS) Die("nvmlDeviceGetMemoryInfo_v2");
  if (m1.total != m2.total || m1.used != m2.used) Die("NVML v1 and v2 disagree");
  if (m1.free + m1.used > m1.total) Die("NVML free + used > total");
  printf("total=%llu used=%llu free=%llu\n", m1.total, m1.used, m1.free);
  return 0;
}

// cuMemAlloc+cuMemFree pairs, alternating between the entry points the program sees (the
// shim's hooks when it is preloaded) and the real driver's own (GSLICE_REAL_DRIVER, already
// loaded by the shim), so both run under the same conditions in the same process: the
// median of the per-pair differences is what the shim adds. Prints "hook=NS real=NS diff=NS".
int AllocBench(int n, size_t bytes) {
  Setup();
  FN(cuMemAlloc_v2);
  FN(cuMemFree_v2);
  auto real_alloc = cuMemAlloc_v2;
  auto real_free = cuMemFree_v2;
  if (const char* path = getenv("GSLICE_REAL_DRIVER"); path != nullptr && path[0] != '\0') {
    void* real = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (real == nullptr) Die("real driver not loaded (GSLICE_REAL_DRIVER)");
    real_alloc = Sym<decltype(real_alloc)>(real, "cuMemAlloc_v2");
    real_free = Sym<decltype(real_free)>(real, "cuMemFree_v2");
  }
  std::vector<int64_t> hooked, direct, diff;
  hooked.reserve(static_cast<size_t>(n));
  direct.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    // One pair: through the hooks, then through the real driver, back to back, so slow
    // phases (other processes holding the driver's locks) hit both alike.
    CUdeviceptr p = 0;
    int64_t t0 = gslice::MonotonicNs();
    CK(cuMemAlloc_v2(&p, bytes));
    CK(cuMemFree_v2(p));
    int64_t t1 = gslice::MonotonicNs();
    CK(real_alloc(&p, bytes));
    CK(real_free(p));
    int64_t t2 = gslice::MonotonicNs();
    hooked.push_back(t1 - t0);
    direct.push_back(t2 - t1);
    diff.push_back((t1 - t0) - (t2 - t1));
  }
  std::sort(hooked.begin(), hooked.end());
  std::sort(direct.begin(), direct.end());
  std::sort(diff.begin(), diff.end());
  printf("hook=%lld real=%lld diff=%lld\n", static_cast<long long>(hooked[hooked.size() / 2]),
         static_cast<long long>(direct[direct.size() / 2]), static_cast<long long>(diff[diff.size() / 2]));
  return 0;
}

// A child forked after the parent allocated exits normally (running the shim's exit code):
// the parent's usage must stay charged, since the child never owned it.
int ForkExit() {
  Setup();
  FN(cuMemAlloc_v2);
  FN(cuMemFree_v2);
  CUdeviceptr p = 0;
  CK(cuMemAlloc_v2(&p, 16ull << 20));
  size_t before = 0, total = 0;
  Info(&before, &total);
  fflush(nullptr);
  pid_t kid = fork();
  if (kid == 0) exit(0);  // exit(), not _exit(): library destructors run
  int status = 0;
  waitpid(kid, &status, 0);
  size_t after = 0;
  Info(&after, &total);
  if (after != before) Die("a forked child's exit changed the parent's usage", static_cast<long>(after) - static_cast<long>(before));
  CUdeviceptr q = 0;
  if (cuMemAlloc_v2(&q, total - (16ull << 20) + (1 << 20)) != CUDA_ERROR_OUT_OF_MEMORY) Die("limit lost after fork");
  CK(cuMemFree_v2(p));
  printf("forkexit ok\n");
  return 0;
}

// Contexts over the limit are refused with CUDA_ERROR_OUT_OF_MEMORY before the driver creates
// them, and the program carries on: any other result is a failure.
int Contexts(int threads) {
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (g_cuda == nullptr) Die("dlopen libcuda.so.1");
  FN(cuInit);
  FN(cuDeviceGet);
  FN(cuDevicePrimaryCtxRetain);
  FN(cuDevicePrimaryCtxRelease_v2);
  FN(cuCtxDestroy_v2);
  CK(cuInit(0));
  CK(cuDeviceGet(&g_dev, 0));
  const CUresult primary = cuDevicePrimaryCtxRetain(&g_ctx, g_dev);
  if (primary != CUDA_SUCCESS && primary != CUDA_ERROR_OUT_OF_MEMORY) Die("cuDevicePrimaryCtxRetain", primary);
  using Create = CUresult (*)(CUcontext*, unsigned, CUdevice);
  static Create create_v1 = Sym<Create>(g_cuda, "cuCtxCreate");
  static Create create_v2 = Sym<Create>(g_cuda, "cuCtxCreate_v2");
  static auto create_v3 =
      Sym<CUresult (*)(CUcontext*, CUexecAffinityParam*, int, unsigned, CUdevice)>(g_cuda, "cuCtxCreate_v3");
  static auto create_v4 = Sym<CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice)>(g_cuda, "cuCtxCreate_v4");
  struct Slot {
    int which;
    CUcontext ctx;
    CUresult r;
  };
  std::vector<Slot> slots(threads);
  static pthread_barrier_t start;
  pthread_barrier_init(&start, nullptr, static_cast<unsigned>(threads));
  std::vector<pthread_t> tids(threads);
  for (int i = 0; i < threads; ++i) {
    slots[i] = Slot{i % 4, nullptr, CUDA_ERROR_UNKNOWN};
    pthread_create(&tids[i], nullptr, [](void* arg) -> void* {
      Slot* s = static_cast<Slot*>(arg);
      pthread_barrier_wait(&start);
      switch (s->which) {
        case 0: s->r = create_v1(&s->ctx, 0, g_dev); break;
        case 1: s->r = create_v2(&s->ctx, 0, g_dev); break;
        case 2: s->r = create_v3(&s->ctx, nullptr, 0, 0, g_dev); break;
        default: s->r = create_v4(&s->ctx, nullptr, 0, g_dev); break;
      }
      return nullptr;
    }, &slots[i]);
  }
  int ok = 0, oom = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(tids[i], nullptr);
    if (slots[i].r == CUDA_SUCCESS) ++ok;
    else if (slots[i].r == CUDA_ERROR_OUT_OF_MEMORY) ++oom;
    else Die("cuCtxCreate: neither a context nor CUDA_ERROR_OUT_OF_MEMORY", slots[i].r);
  }
  printf("contexts primary=%s ok=%d oom=%d\n", primary == CUDA_SUCCESS ? "ok" : "oom", ok, oom);
  fflush(stdout);
  char buf[64];
  while (fgets(buf, sizeof buf, stdin) != nullptr) {
  }
  for (const Slot& s : slots) {
    if (s.r == CUDA_SUCCESS) CK(cuCtxDestroy_v2(s.ctx));
  }
  if (primary == CUDA_SUCCESS) CK(cuDevicePrimaryCtxRelease_v2(g_dev));
  printf("contexts done\n");
  return 0;
}

// The code at an entry point, as interpose/gen_exports.py emits it: a gated trampoline starts
// with `movq gate_word(%rip), %r11; cmpl $0, (%r11)`; an ungated one is `jmp *slot(%rip)`.
struct EntryCode {
  bool gated = false;
  bool plain = false;
  const void* gate_word = nullptr;  // where a gated one reads the gate word's address
};

EntryCode Classify(const void* fn) {
  const auto* b = static_cast<const unsigned char*>(fn);
  EntryCode c;
  if (b[0] == 0x4c && b[1] == 0x8b && b[2] == 0x1d && b[7] == 0x41 && b[8] == 0x83 && b[9] == 0x3b && b[10] == 0x00) {
    int32_t rel;
    memcpy(&rel, b + 3, sizeof rel);
    c.gated = true;
    c.gate_word = b + 7 + rel;
  } else if (b[0] == 0xff && b[1] == 0x25) {
    c.plain = true;
  }
  return c;
}

std::vector<std::string> ReadNames(const char* path, const char* macro) {
  std::vector<std::string> out;
  FILE* f = fopen(path, "r");
  if (f == nullptr) Die("cannot open a name list");
  char line[512];
  while (fgets(line, sizeof line, f) != nullptr) {
    std::string l(line, strcspn(line, "\r\n"));
    if (macro == nullptr) {
      if (!l.empty()) out.push_back(l);
      continue;
    }
    const std::string open = std::string(macro) + "(";
    size_t p = l.find_first_not_of(" \t");
    if (p == std::string::npos || l.compare(p, open.size(), open) != 0) continue;
    size_t close = l.find(')', p);
    out.push_back(l.substr(p + open.size(), close - p - open.size()));
  }
  fclose(f);
  return out;
}

// The name cuGetProcAddress is asked for: the export without its version and stream suffixes.
std::string BaseName(std::string n) {
  for (const char* sfx : {"_ptsz", "_ptds"}) {
    size_t len = strlen(sfx);
    if (n.size() > len && n.compare(n.size() - len, len, sfx) == 0) n.resize(n.size() - len);
  }
  size_t v = n.rfind("_v");
  if (v != std::string::npos && v + 2 < n.size() && n.find_first_not_of("0123456789", v + 2) == std::string::npos) {
    n.resize(v);
  }
  return n;
}

int GateCheck(const char* names_path, const char* ungated_path) {
  Setup();
  const std::vector<std::string> names = ReadNames(names_path, nullptr);
  const std::vector<std::string> ungated = ReadNames(ungated_path, "GSLICE_UNGATED");
  auto is_ungated = [&](const std::string& n) { return std::find(ungated.begin(), ungated.end(), n) != ungated.end(); };
  if (names.size() < 100 || ungated.empty()) Die("too few names", static_cast<long>(names.size()));
  const void* gate_word = nullptr;
  int gated = 0, failures = 0;
  auto same_word = [&](const EntryCode& c) {
    if (gate_word == nullptr) gate_word = c.gate_word;
    return c.gate_word == gate_word;
  };
  for (const std::string& n : names) {
    void* fn = dlsym(g_cuda, n.c_str());
    if (fn == nullptr) Die("an export is missing");
    EntryCode c = Classify(fn);
    const bool want_gated = !is_ungated(n);
    if (want_gated ? !(c.gated && same_word(c)) : !c.plain) {
      fprintf(stderr, "client: %s: %s\n", n.c_str(), want_gated ? "does not pass the resume gate" : "ungated.def names it but it is gated");
      ++failures;
    }
    gated += c.gated ? 1 : 0;
  }
  for (const std::string& u : ungated) {
    if (std::find(names.begin(), names.end(), u) == names.end()) {
      fprintf(stderr, "client: ungated.def names %s, which the shim does not export\n", u.c_str());
      ++failures;
    }
  }
  // Every pointer cuGetProcAddress hands out is a gated trampoline (or an ungated export).
  FN(cuGetProcAddress_v2);
  int handed = 0;
  for (const std::string& n : names) {
    const std::string base = BaseName(n);
    for (cuuint64_t flags : {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
      void* p = nullptr;
      if (cuGetProcAddress_v2(base.c_str(), &p, 13000, flags, nullptr) != CUDA_SUCCESS || p == nullptr) continue;
      ++handed;
      EntryCode c = Classify(p);
      Dl_info info{};
      const bool named_ungated = c.plain && dladdr(p, &info) != 0 && info.dli_sname != nullptr &&
                                 dlsym(g_cuda, info.dli_sname) == p && is_ungated(info.dli_sname);
      if (!(c.gated && same_word(c)) && !named_ungated) {
        fprintf(stderr, "client: cuGetProcAddress(%s, flags %llu) hands out a function that skips the resume gate\n",
                base.c_str(), static_cast<unsigned long long>(flags));
        ++failures;
      }
    }
  }
  if (failures > 0) Die("entry points skip the resume gate", failures);
  if (handed == 0) Die("cuGetProcAddress handed out nothing");
  printf("gatecheck ok exports=%zu gated=%d ungated=%zu procaddress=%d\n", names.size(), gated, ungated.size(), handed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: client MODE [ARGS]\n");
    return 2;
  }
  std::string mode = argv[1];
  if (mode == "paths" && argc > 2) return Paths(argv[2]);
  if (mode == "info") return InfoMode();
  if (mode == "hold" && argc > 2) return Hold(strtoull(argv[2], nullptr, 10));
  if (mode == "watch") return Watch();
  if (mode == "churn" && argc > 2) return Churn(static_cast<unsigned>(atoi(argv[2])));
  if (mode == "init") return Init();
  if (mode == "procaddress") return ProcAddress();
  if (mode == "nvml") return Nvml();
  if (mode == "forkexit") return ForkExit();
  if (mode == "contexts" && argc > 2) return Contexts(atoi(argv[2]));
  if (mode == "gatecheck" && argc > 3) return GateCheck(argv[2], argv[3]);
  if (mode == "allocbench" && argc > 3) return AllocBench(atoi(argv[2]), strtoull(argv[3], nullptr, 10));
  fprintf(stderr, "client: unknown mode %s\n", mode.c_str());
  return 2;
}
