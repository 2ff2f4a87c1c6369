// gslice_remote_probe's NVML modes: NVML as a monitoring tool reaches it, nvidia-smi's private
// table, a call that is not forwarded.
#include "probe.h"

#include <dlfcn.h>
#include <string.h>

#include <string>

#include "gslice/nvml_subset.h"

namespace gslice::probe {

namespace {

using NvmlInitFn = nvmlReturn_t (*)();
using NvmlCountFn = nvmlReturn_t (*)(unsigned int*);
using NvmlHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using NvmlTextFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using NvmlMemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using NvmlMemoryV2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using NvmlProcessesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
using NvmlErrorFn = const char* (*)(nvmlReturn_t);

// NVML as a monitoring tool reaches it: dlopen, no CUDA unless asked (cuda: a CUDA context
// with 256 MiB allocated first, so that the slice has a process and usage).
int NvmlOf(bool cuda) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) {
    printf("no libnvidia-ml.so.1: %s\n", dlerror());
    return 1;
  }
  auto sym = [&](const char* name) {
    void* p = dlsym(nvml, name);
    if (p == nullptr) {
      printf("no %s\n", name);
      exit(1);
    }
    return p;
  };
  auto init = reinterpret_cast<NvmlInitFn>(sym("nvmlInit_v2"));
  auto count_fn = reinterpret_cast<NvmlCountFn>(sym("nvmlDeviceGetCount_v2"));
  auto handle_fn = reinterpret_cast<NvmlHandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name_fn = reinterpret_cast<NvmlTextFn>(sym("nvmlDeviceGetName"));
  auto uuid_fn = reinterpret_cast<NvmlTextFn>(sym("nvmlDeviceGetUUID"));
  auto memory_fn = reinterpret_cast<NvmlMemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
  auto memory_v2_fn = reinterpret_cast<NvmlMemoryV2Fn>(sym("nvmlDeviceGetMemoryInfo_v2"));
  auto processes_fn = reinterpret_cast<NvmlProcessesFn>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
  auto error_fn = reinterpret_cast<NvmlErrorFn>(sym("nvmlErrorString"));
  CUdeviceptr held = 0;
  if (cuda) {
    CUdevice dev;
    Setup(&dev);
    CK(cuMemAlloc(&held, 256ull << 20));
  }
  printf("nvmlInit: %s\n", error_fn(init()));
  unsigned int count = 0;
  printf("count: %s, %u device(s)\n", error_fn(count_fn(&count)), count);
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {}, uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    nvmlMemory_t memory = {};
    nvmlMemory_v2_t memory_v2 = {};
    memory_v2.version = nvmlMemory_v2;
    if (handle_fn(i, &device) != NVML_SUCCESS || name_fn(device, name, sizeof name) != NVML_SUCCESS ||
        uuid_fn(device, uuid, sizeof uuid) != NVML_SUCCESS || memory_fn(device, &memory) != NVML_SUCCESS ||
        memory_v2_fn(device, &memory_v2) != NVML_SUCCESS) {
      printf("device %u: a query failed\n", i);
      return 1;
    }
    printf("device %u: %s, %s\n", i, name, strncmp(uuid, "GPU-", 4) == 0 ? "GPU uuid" : uuid);
    printf("memory: total %llu, used %llu, free %llu; v2 total %llu\n", memory.total, memory.used, memory.free,
           memory_v2.total);
    unsigned int processes = 0;
    const nvmlReturn_t sizing = processes_fn(device, &processes, nullptr);
    std::vector<nvmlProcessInfo_t> infos(processes + 1);
    unsigned int room = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t listed = processes_fn(device, &room, infos.data());
    printf("processes: %s with %u, then %s with %u%s\n", error_fn(sizing), processes, error_fn(listed), room,
           room > 0 && infos[0].usedGpuMemory >= (256ull << 20) ? ", the first using the allocation" : "");
  }
  if (held != 0) CK(cuMemFree(held));
  return 0;
}

}  // namespace

int Nvml(int, char**) {
  return NvmlOf(false);
}

int NvmlCuda(int, char**) {
  return NvmlOf(true);
}

// The table nvidia-smi asks of NVML (remote/client/nvml_tables.cc), through the client only.
int NvmlTable(int, char**) {
  CUdevice dev;
  Setup(&dev);
  CUdeviceptr held = 0;
  CK(cuMemAlloc(&held, 256ull << 20));  // a process of the slice's to list
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) return 1;
  using TableFn = nvmlReturn_t (*)(const void**, const void*);
  auto table_fn = reinterpret_cast<TableFn>(dlsym(nvml, "nvmlInternalGetExportTable"));
  auto init = reinterpret_cast<NvmlInitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto handle_fn = reinterpret_cast<NvmlHandleFn>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto pci_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)>(dlsym(nvml, "nvmlDeviceGetPciInfo_v3"));
  auto processes_fn = reinterpret_cast<NvmlProcessesFn>(dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (table_fn == nullptr || init == nullptr || handle_fn == nullptr || pci_fn == nullptr || processes_fn == nullptr) {
    return 1;
  }
  if (init() != NVML_SUCCESS) return 1;
  const uint8_t smi[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e, 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
  const void* table = nullptr;
  printf("table: %d\n", static_cast<int>(table_fn(&table, smi)));
  if (table == nullptr) return 1;
  const auto* words = static_cast<const uint64_t*>(table);
  printf("size word: %llu\n", static_cast<unsigned long long>(words[0]));
  auto slot = [&](int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(words[i])); };
  printf("slot 1: %s, slot 2: %s\n", slot(1) == nullptr ? "null" : "code", slot(2) == nullptr ? "null" : "code");
  char bus[34] = {};
  const auto bus_fn = reinterpret_cast<nvmlReturn_t (*)(unsigned, char*, unsigned)>(slot(81));
  nvmlDevice_t device = nullptr;
  nvmlPciInfo_t pci = {};
  if (handle_fn(0, &device) != NVML_SUCCESS || pci_fn(device, &pci) != NVML_SUCCESS) return 1;
  const nvmlReturn_t bus_result = bus_fn(0, bus, sizeof bus);
  printf("slot 81: %d, %s\n", static_cast<int>(bus_result),
         strcmp(bus, pci.busIdLegacy) == 0 && bus[0] != '\0' ? "the device's bus id" : bus);
  struct Entry {
    uint32_t pid, zero;
    uint64_t used;
    uint32_t gi, ci;
    uint64_t zero2;
    char command[4096];
  };
  std::vector<Entry> entries(500);
  unsigned int n = 500;
  const auto list_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, Entry*)>(slot(213));
  const nvmlReturn_t listed = list_fn(device, &n, entries.data());
  unsigned int public_n = 16;
  std::vector<nvmlProcessInfo_t> infos(public_n);
  if (processes_fn(device, &public_n, infos.data()) != NVML_SUCCESS) return 1;
  bool same = listed == NVML_SUCCESS && n == public_n && n > 0;
  for (unsigned int i = 0; same && i < n; ++i) {
    same = entries[i].pid == infos[i].pid && entries[i].used == infos[i].usedGpuMemory &&
           entries[i].gi == infos[i].gpuInstanceId && entries[i].ci == infos[i].computeInstanceId;
  }
  printf("slot 213: %d, %s\n", static_cast<int>(listed), same ? "the public list's processes" : "DIFFERENT");
  unsigned int none = 0;
  const nvmlReturn_t no_room = list_fn(device, &none, nullptr);
  printf("slot 213 without room: %d, count %s\n", static_cast<int>(no_room),
         none == public_n ? "the number needed" : "WRONG");
  printf("slot 230: %d\n", static_cast<int>(reinterpret_cast<nvmlReturn_t (*)()>(slot(230))()));
  const uint8_t other[16] = {1, 2, 3, 4};
  const void* missing = &table;
  const nvmlReturn_t unknown = table_fn(&missing, other);
  printf("another table: %d, %s\n", static_cast<int>(unknown), missing == nullptr ? "null" : "set");
  CK(cuMemFree(held));
  return 0;
}

int NvmlMissing(int, char**) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  auto fn = nvml != nullptr ? reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>(
                                  dlsym(nvml, "nvmlDeviceGetBoardId"))
                            : nullptr;
  if (fn == nullptr) return 1;
  printf("nvmlDeviceGetBoardId: %d\n", static_cast<int>(fn(nullptr, nullptr)));
  return 0;
}

}  // namespace gslice::probe
