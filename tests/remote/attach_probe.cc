// gslice_attach_probe: a driver-API program for the attach-on-use and idle-release tests,
// run through the forwarding client. Each step prints a line and waits for a line on stdin,
// so that the test can look at the server side in between.
//
//   attach_probe  1. cuInit, the driver version, the device count, name, an attribute and
//                    the total memory: prints "queried <count> <total bytes>", waits
//                 2. allocates 64 MiB, writes a pattern: prints "written", waits; also 4 MiB
//                    of page-locked memory (cuMemAllocHost: shared with a same-host worker)
//                    copied to 4 MiB of device memory
//                 3. reads it back: prints "intact" or "CORRUPT", then reads it again and
//                    prints "reread <seconds>" (the same copy with nothing to resume); copies
//                    the 4 MiB back into the cleared page-locked memory on a stream: prints
//                    "pinned intact" or "pinned CORRUPT", waits
//                 4. frees, exits
//   attach_probe nvml
//                 1. NVML only (dlopen'ed): init, the device count, device 0's handle, name,
//                    memory and processes: prints "nvml <count> <total> <used> <processes>", waits
//                 2. a CUDA allocation of 64 MiB (the client attaches), then the same handle
//                    again: prints "attached <same name|OTHER NAME> <used>"; then, as NCCL
//                    finds its GPU, the handle by the device's PCI bus id under the first
//                    version's name: prints "by bus id <same device|OTHER DEVICE>", waits
//                 3. nvmlShutdown: prints "shutdown <result>", exits
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gslice/clock.h"
#include "gslice/nvml_subset.h"

namespace {

#define CK(call)                                                      \
  do {                                                                \
    CUresult r_ = (call);                                             \
    if (r_ != CUDA_SUCCESS) {                                         \
      printf("FAILED %s: %d (line %d)\n", #call, r_, __LINE__);       \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

void WaitForLine() {
  char c;
  while (read(0, &c, 1) == 1 && c != '\n') {
  }
}

#define NK(call)                                                \
  do {                                                          \
    nvmlReturn_t r_ = (call);                                   \
    if (r_ != NVML_SUCCESS) {                                   \
      printf("FAILED %s: %d (line %d)\n", #call, r_, __LINE__); \
      exit(1);                                                  \
    }                                                           \
  } while (0)

// NVML before any CUDA call, as nvidia-smi or an NVML-based device check makes it; then CUDA.
int Nvml() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) {
    printf("FAILED dlopen libnvidia-ml.so.1: %s\n", dlerror());
    return 1;
  }
  auto sym = [&](const char* name) {
    void* p = dlsym(nvml, name);
    if (p == nullptr) {
      printf("FAILED dlsym %s\n", name);
      exit(1);
    }
    return p;
  };
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
  auto count_fn = reinterpret_cast<nvmlReturn_t (*)(unsigned int*)>(sym("nvmlDeviceGetCount_v2"));
  auto handle_fn = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)>(sym("nvmlDeviceGetName"));
  auto memory_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(sym("nvmlDeviceGetMemoryInfo"));
  auto processes_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*)>(
      sym("nvmlDeviceGetComputeRunningProcesses_v3"));
  auto pci_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)>(sym("nvmlDeviceGetPciInfo_v3"));
  auto by_bus_fn = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByPciBusId"));
  NK(init());
  unsigned int count = 0;
  NK(count_fn(&count));
  nvmlDevice_t device = nullptr;
  NK(handle_fn(0, &device));
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  NK(name_fn(device, name, sizeof name));
  nvmlMemory_t memory = {};
  NK(memory_fn(device, &memory));
  nvmlProcessInfo_t infos[8];
  unsigned int processes = 8;
  NK(processes_fn(device, &processes, infos));
  printf("nvml %u %llu %llu %u\n", count, memory.total, memory.used, processes);
  WaitForLine();

  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUdeviceptr p = 0;
  CK(cuMemAlloc(&p, 64ull << 20));
  // The handle the probe gave out names the same device in the worker.
  char again[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  NK(name_fn(device, again, sizeof again));
  NK(memory_fn(device, &memory));
  printf("attached %s %llu\n", std::string(again) == name ? "same name" : "OTHER NAME", memory.used);
  nvmlPciInfo_t pci = {};
  NK(pci_fn(device, &pci));
  nvmlDevice_t by_bus = nullptr;
  NK(by_bus_fn(pci.busId, &by_bus));
  printf("by bus id %s\n", by_bus == device ? "same device" : "OTHER DEVICE");
  WaitForLine();
  printf("shutdown %d\n", static_cast<int>(shutdown()));
  CK(cuMemFree(p));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc > 1 && std::string(argv[1]) == "nvml") return Nvml();
  CK(cuInit(0));
  int version = 0, count = 0, sms = 0;
  CK(cuDriverGetVersion(&version));
  CK(cuDeviceGetCount(&count));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  char name[128];
  CK(cuDeviceGetName(name, sizeof name, dev));
  CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, dev));
  printf("queried %d %zu\n", count, total);
  WaitForLine();

  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  const size_t bytes = 64ull << 20;
  std::vector<uint32_t> data(bytes / 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint32_t>(i * 2654435761u);
  CUdeviceptr p = 0;
  CK(cuMemAlloc(&p, bytes));
  CK(cuMemcpyHtoD(p, data.data(), bytes));
  constexpr size_t kPinned = 4 << 20;
  void* pinned = nullptr;
  CK(cuMemAllocHost(&pinned, kPinned));
  auto* words = static_cast<uint32_t*>(pinned);
  for (size_t i = 0; i < kPinned / 4; ++i) words[i] = static_cast<uint32_t>(i * 40503u + 7);
  CUdeviceptr q = 0;
  CK(cuMemAlloc(&q, kPinned));
  CK(cuMemcpyHtoDAsync(q, pinned, kPinned, nullptr));
  CK(cuCtxSynchronize());
  printf("written\n");
  WaitForLine();

  std::vector<uint32_t> back(data.size());
  CK(cuMemcpyDtoH(back.data(), p, bytes));
  printf("%s\n", back == data ? "intact" : "CORRUPT");
  fflush(stdout);
  const int64_t t0 = gslice::MonotonicNs();
  CK(cuMemcpyDtoH(back.data(), p, bytes));
  printf("reread %.6f\n", static_cast<double>(gslice::MonotonicNs() - t0) / 1e9);
  std::memset(pinned, 0, kPinned);
  CK(cuMemcpyDtoHAsync(pinned, q, kPinned, nullptr));
  CK(cuCtxSynchronize());
  bool same = true;
  for (size_t i = 0; i < kPinned / 4; ++i) same = same && words[i] == static_cast<uint32_t>(i * 40503u + 7);
  printf("pinned %s\n", same ? "intact" : "CORRUPT");
  WaitForLine();
  CK(cuMemFreeHost(pinned));
  CK(cuMemFree(q));
  CK(cuMemFree(p));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
