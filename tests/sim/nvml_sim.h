// The simulated NVML, opened as the daemon opens NVML: dlopen + dlsym.
#pragma once

#include <dlfcn.h>

#include "gslice/nvml_subset.h"

namespace gslice::test {

struct Nvml {
  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib == nullptr) return;
#define GSLICE_NVML_LOAD(f) f = reinterpret_cast<decltype(&::f)>(dlsym(lib, #f))
    GSLICE_NVML_LOAD(nvmlInit_v2);
    GSLICE_NVML_LOAD(nvmlShutdown);
    GSLICE_NVML_LOAD(nvmlErrorString);
    GSLICE_NVML_LOAD(nvmlSystemGetDriverVersion);
    GSLICE_NVML_LOAD(nvmlSystemGetCudaDriverVersion_v2);
    GSLICE_NVML_LOAD(nvmlDeviceGetCount_v2);
    GSLICE_NVML_LOAD(nvmlDeviceGetHandleByIndex_v2);
    GSLICE_NVML_LOAD(nvmlDeviceGetHandleByUUID);
    GSLICE_NVML_LOAD(nvmlDeviceGetName);
    GSLICE_NVML_LOAD(nvmlDeviceGetUUID);
    GSLICE_NVML_LOAD(nvmlDeviceGetIndex);
    GSLICE_NVML_LOAD(nvmlDeviceGetMemoryInfo);
    GSLICE_NVML_LOAD(nvmlDeviceGetMemoryInfo_v2);
    GSLICE_NVML_LOAD(nvmlDeviceGetUtilizationRates);
    GSLICE_NVML_LOAD(nvmlDeviceGetComputeRunningProcesses_v3);
    GSLICE_NVML_LOAD(nvmlDeviceGetPciInfo_v3);
#undef GSLICE_NVML_LOAD
  }
  ~Nvml() {
    if (lib != nullptr) dlclose(lib);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  void* lib = nullptr;
  decltype(&::nvmlInit_v2) nvmlInit_v2 = nullptr;
  decltype(&::nvmlShutdown) nvmlShutdown = nullptr;
  decltype(&::nvmlErrorString) nvmlErrorString = nullptr;
  decltype(&::nvmlSystemGetDriverVersion) nvmlSystemGetDriverVersion = nullptr;
  decltype(&::nvmlSystemGetCudaDriverVersion_v2) nvmlSystemGetCudaDriverVersion_v2 = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) nvmlDeviceGetCount_v2 = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) nvmlDeviceGetHandleByIndex_v2 = nullptr;
  decltype(&::nvmlDeviceGetHandleByUUID) nvmlDeviceGetHandleByUUID = nullptr;
  decltype(&::nvmlDeviceGetName) nvmlDeviceGetName = nullptr;
  decltype(&::nvmlDeviceGetUUID) nvmlDeviceGetUUID = nullptr;
  decltype(&::nvmlDeviceGetIndex) nvmlDeviceGetIndex = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo) nvmlDeviceGetMemoryInfo = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo_v2) nvmlDeviceGetMemoryInfo_v2 = nullptr;
  decltype(&::nvmlDeviceGetUtilizationRates) nvmlDeviceGetUtilizationRates = nullptr;
  decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) nvmlDeviceGetComputeRunningProcesses_v3 = nullptr;
  decltype(&::nvmlDeviceGetPciInfo_v3) nvmlDeviceGetPciInfo_v3 = nullptr;
};

}  // namespace gslice::test
