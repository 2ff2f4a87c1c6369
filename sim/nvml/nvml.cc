// The simulated libnvidia-ml.so.1: NVML answers read from the simulated node. Like the
// real NVML it lists every device of the node (CUDA_VISIBLE_DEVICES does not apply).
#include <strings.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "gslice/nvml_subset.h"
#include "node.h"

#define GSLICE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

struct nvmlDevice_st {
  uint32_t index;
};

namespace {

using gslice::sim::Node;

// Reported versions: recognisably the simulator's, shaped like the driver's.
constexpr char kDriverVersion[] = "580.0.0";
constexpr char kNvmlVersion[] = "13.580.0.0";
constexpr int kCudaDriverVersion = 13000;

std::mutex g_mu;
Node g_node_storage;
Node* g_node = nullptr;
int g_init_count = 0;
nvmlDevice_st g_handles[gslice::sim::kMaxDevices];

Node* Initialized() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_init_count > 0 ? g_node : nullptr;
}

nvmlReturn_t Init(unsigned flags) {
  if ((flags & ~(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH)) != 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  std::lock_guard<std::mutex> g(g_mu);
  if (g_node == nullptr) {
    std::string error;
    if (!Node::Open(&g_node_storage, &error)) {
      std::fprintf(stderr, "gslice sim: %s\n", error.c_str());
      return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    g_node = &g_node_storage;
    for (uint32_t i = 0; i < gslice::sim::kMaxDevices; ++i) g_handles[i].index = i;
  }
  ++g_init_count;
  return NVML_SUCCESS;
}

// Validates a handle; returns the device index or -1.
int DeviceIndex(Node* node, nvmlDevice_t device) {
  if (device == nullptr) return -1;
  for (uint32_t i = 0; i < node->device_count(); ++i) {
    if (device == &g_handles[i]) return static_cast<int>(i);
  }
  return -1;
}

nvmlReturn_t CopyString(const char* s, char* out, unsigned length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s, std::strlen(s) + 1);
  return NVML_SUCCESS;
}

#define REQUIRE_NVML(node) \
  Node* node = Initialized(); \
  if (node == nullptr) return NVML_ERROR_UNINITIALIZED

#define REQUIRE_HANDLE(node, device, index) \
  int index = DeviceIndex(node, device);    \
  if (index < 0) return NVML_ERROR_INVALID_ARGUMENT

// Processes with a context or memory on the device. infos may be null (count only).
template <typename Info>
nvmlReturn_t Processes(nvmlDevice_t device, unsigned* count, Info* infos, bool with_instances) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  node->Reap();
  unsigned n = 0;
  const unsigned capacity = infos == nullptr ? 0 : *count;
  for (uint32_t i = 0; i < gslice::sim::kMaxProcesses; ++i) {
    gslice::sim::ProcessSlot& s = node->slot(static_cast<int>(i));
    if (s.state.load() != static_cast<uint32_t>(gslice::sim::SlotState::kLive)) continue;
    uint64_t used = s.used[index].load();
    if (used == 0 && s.contexts[index].load() == 0) continue;
    if (n < capacity) {
      Info info{};
      info.pid = static_cast<unsigned>(s.pid);
      info.usedGpuMemory = used;
      if constexpr (sizeof(Info) == sizeof(nvmlProcessInfo_t)) {
        if (with_instances) {
          info.gpuInstanceId = 0xFFFFFFFFu;
          info.computeInstanceId = 0xFFFFFFFFu;
        }
      }
      infos[n] = info;
    }
    ++n;
  }
  const bool fits = n <= capacity;
  *count = n;
  if (!fits) return NVML_ERROR_INSUFFICIENT_SIZE;
  return NVML_SUCCESS;
}

}  // namespace

GSLICE_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return Init(0); }
GSLICE_NVML_EXPORT nvmlReturn_t nvmlInit(void) { return Init(0); }
GSLICE_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return Init(flags); }

GSLICE_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard<std::mutex> g(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
  }
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  REQUIRE_NVML(node);
  return CopyString(kDriverVersion, version, length);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return CopyString(kNvmlVersion, version, length);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  if (v == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *v = kCudaDriverVersion;
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  return nvmlSystemGetCudaDriverVersion(v);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  REQUIRE_NVML(node);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = node->device_count();
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                              nvmlDevice_t* device) {
  REQUIRE_NVML(node);
  if (device == nullptr || index >= node->device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_handles[index];
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                           nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  REQUIRE_NVML(node);
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < node->device_count(); ++i) {
    if (std::strcmp(node->device(i).uuid_text, uuid) == 0) {
      *device = &g_handles[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

// By the bus id nvmlDeviceGetPciInfo_v3 gives, in either of its forms ("00000000:BB:00.0" or
// "0000:BB:00.0"), in any case (NCCL asks by the runtime's cudaDeviceGetPCIBusId).
GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  REQUIRE_NVML(node);
  if (bus_id == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < node->device_count(); ++i) {
    nvmlPciInfo_t pci;
    if (nvmlDeviceGetPciInfo_v3(&g_handles[i], &pci) != NVML_SUCCESS) continue;
    if (strcasecmp(bus_id, pci.busId) == 0 || strcasecmp(bus_id, pci.busIdLegacy) == 0) {
      *device = &g_handles[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                  unsigned int length) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  return CopyString(node->device(static_cast<uint32_t>(index)).name, name, length);
}

// Simulated devices run any number of contexts, as a GPU in compute mode DEFAULT does.
GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  (void)index;
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = NVML_COMPUTEMODE_DEFAULT;
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                  unsigned int length) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  return CopyString(node->device(static_cast<uint32_t>(index)).uuid_text, uuid, length);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* out) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *out = static_cast<unsigned>(index);
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const uint64_t total = node->device(static_cast<uint32_t>(index)).total_memory;
  const uint64_t used = node->Used(static_cast<uint32_t>(index));
  memory->total = total;
  memory->used = used;
  memory->free = used >= total ? 0 : total - used;
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                           nvmlMemory_v2_t* memory) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  nvmlMemory_t m;
  nvmlDeviceGetMemoryInfo(device, &m);
  memory->total = m.total;
  memory->reserved = 0;
  memory->used = m.used;
  memory->free = m.free;
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                              nvmlUtilization_t* utilization) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  double u = node->Utilization(static_cast<uint32_t>(index));
  utilization->gpu = static_cast<unsigned>(u * 100.0 + 0.5);
  utilization->memory = 0;  // the sim does not model memory bandwidth
  return NVML_SUCCESS;
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                        unsigned int* count,
                                                                        nvmlProcessInfo_t* infos) {
  return Processes(device, count, infos, true);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                        unsigned int* count,
                                                                        nvmlProcessInfo_v2_t* infos) {
  return Processes(device, count, infos, true);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                     unsigned int* count,
                                                                     nvmlProcessInfo_v1_t* infos) {
  return Processes(device, count, infos, false);
}

GSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  REQUIRE_NVML(node);
  REQUIRE_HANDLE(node, device, index);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(pci, 0, sizeof *pci);
  const unsigned bus = node->device(static_cast<uint32_t>(index)).pci_bus;
  pci->domain = 0;
  pci->bus = bus;
  pci->device = 0;
  pci->pciDeviceId = 0x000010DEu;  // NVIDIA's vendor id; no real device id
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0u, bus, 0u);
  std::snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0u, bus, 0u);
  return NVML_SUCCESS;
}
