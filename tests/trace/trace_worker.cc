// A CUDA program with NVTX ranges, for the timeline tests (trace_test.cc): it reaches the
// driver like cudart (dlopen + dlsym of libcuda.so.1) and annotates its work with NVTX
// exactly as PyTorch does (nvtx3, header-only: nvtxRangePushA / nvtxRangePop / nvtxMarkA).
//
//   trace_worker step             one "step" range holding "forward" (busy kernels of 20 ms
//                                 and 10 ms, then a synchronisation), a "checkpoint" mark and
//                                 "copy" (a 1 MiB host-to-device copy); then 300 ms idle
//   trace_worker many N           N launches of a 0 us kernel, one synchronisation
//   trace_worker capped N MS      N launches of an MS ms kernel, synchronised each
//   trace_worker wait             runs "step" whenever a line arrives on stdin, until EOF
//   trace_worker fork             runs "step", then forks a child that exits without CUDA
//                                 (as a framework's data-loading workers do)
//   trace_worker early            before any CUDA call opens "outer", runs "prologue" (20 ms
//                                 asleep) and marks "before-cuda"; then starts CUDA and runs
//                                 "inner" (a busy kernel of 1 ms) inside "outer"
#include <cuda.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace {

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*retain)(CUcontext*, CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*load)(CUmodule*, const void*);
  CUresult (*get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void**, void**);
  CUresult (*sync)(CUstream);
  CUresult (*alloc)(CUdeviceptr*, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void*, size_t);
};

Driver d;
CUfunction g_busy = nullptr;

template <typename F>
void Load(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (*out == nullptr) {
    fprintf(stderr, "trace_worker: no %s\n", name);
    exit(3);
  }
}

#define CHECK(call)                                                  \
  do {                                                               \
    CUresult r_ = (call);                                            \
    if (r_ != CUDA_SUCCESS) {                                        \
      fprintf(stderr, "trace_worker: %s failed: %d\n", #call, r_);  \
      exit(4);                                                       \
    }                                                                \
  } while (0)

void Setup() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h == nullptr) {
    fprintf(stderr, "trace_worker: %s\n", dlerror());
    exit(3);
  }
  Load(h, "cuInit", &d.init);
  Load(h, "cuDeviceGet", &d.device_get);
  Load(h, "cuDevicePrimaryCtxRetain", &d.retain);
  Load(h, "cuCtxSetCurrent", &d.set_current);
  Load(h, "cuModuleLoadData", &d.load);
  Load(h, "cuModuleGetFunction", &d.get_function);
  Load(h, "cuLaunchKernel", &d.launch);
  Load(h, "cuStreamSynchronize", &d.sync);
  Load(h, "cuMemAlloc_v2", &d.alloc);
  Load(h, "cuMemFree_v2", &d.free);
  Load(h, "cuMemcpyHtoD_v2", &d.htod);
  CHECK(d.init(0));
  CUdevice dev;
  CHECK(d.device_get(&dev, 0));
  CUcontext ctx;
  CHECK(d.retain(&ctx, dev));
  CHECK(d.set_current(ctx));
  CUmodule mod;
  CHECK(d.load(&mod, "gslice-sim-module 1\nkernel busy busy\n"));
  CHECK(d.get_function(&g_busy, mod, "busy"));
}

void Busy(uint64_t us) {
  void* params[] = {&us};
  CHECK(d.launch(g_busy, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
}

void Step() {
  nvtxRangePushA("step");
  nvtxRangePushA("forward");
  Busy(20000);
  Busy(10000);
  CHECK(d.sync(nullptr));
  nvtxRangePop();
  nvtxMarkA("checkpoint");
  nvtxRangePushA("copy");
  static char host[1 << 20];
  CUdeviceptr p;
  CHECK(d.alloc(&p, sizeof host));
  CHECK(d.htod(p, host, sizeof host));
  CHECK(d.free(p));
  nvtxRangePop();
  nvtxRangePop();
}

// A PyTorch script's shape: ranges around everything, opened before CUDA starts.
void Early() {
  nvtxRangePushA("outer");
  nvtxRangePushA("prologue");
  usleep(20'000);
  nvtxRangePop();
  nvtxMarkA("before-cuda");
  Setup();
  nvtxRangePushA("inner");
  Busy(1000);
  CHECK(d.sync(nullptr));
  nvtxRangePop();
  nvtxRangePop();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "early") {
    Early();
    return 0;
  }
  Setup();
  if (cmd == "step") {
    Step();
    usleep(300'000);  // counters are sampled every 100 ms
  } else if (cmd == "many" && argc > 2) {
    const int n = atoi(argv[2]);
    for (int i = 0; i < n; ++i) Busy(0);
    CHECK(d.sync(nullptr));
  } else if (cmd == "capped" && argc > 3) {
    const int n = atoi(argv[2]);
    const uint64_t ms = strtoull(argv[3], nullptr, 10);
    for (int i = 0; i < n; ++i) {
      Busy(ms * 1000);
      CHECK(d.sync(nullptr));
    }
  } else if (cmd == "fork") {
    Step();
    const pid_t child = fork();
    if (child == 0) exit(0);  // runs the atexit handlers, as a worker's normal exit does
    int status = 0;
    waitpid(child, &status, 0);
  } else if (cmd == "wait") {
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) != nullptr) {
      Step();
      printf("stepped\n");
      fflush(stdout);
    }
    return 0;  // nothing more to say: whoever closed stdin may have closed our stdout too
  } else {
    fprintf(stderr, "usage: trace_worker step | many N | capped N MS | wait | fork\n");
    return 2;
  }
  printf("%s ok\n", cmd.c_str());
  return 0;
}
