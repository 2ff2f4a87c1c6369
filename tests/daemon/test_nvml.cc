// A minimal libnvidia-ml.so.1 for gsliced's own tests when the simulated driver is not
// built: GSLICE_SIM_DEVICES GPUs (default 2) of GSLICE_SIM_MEMORY bytes (default 16 GiB),
// fixed UUIDs, and memory "used" read from GSLICE_TEST_NVML_USED (bytes, every GPU).
// It implements only the calls gpu_inventory.cc makes.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gslice/nvml_subset.h"
#include "gslice/units.h"

struct nvmlDevice_st {
  unsigned index;
};

namespace {

nvmlDevice_st g_devices[16];

unsigned DeviceCount() {
  const char* env = std::getenv("GSLICE_SIM_DEVICES");
  int n = env ? std::atoi(env) : 2;
  return static_cast<unsigned>(n < 0 ? 0 : (n > 16 ? 16 : n));
}

unsigned long long Memory() {
  const char* env = std::getenv("GSLICE_SIM_MEMORY");
  if (env == nullptr) return 16ull << 30;
  gslice::ParsedSize p = gslice::ParseSize(env);
  return p.ok ? p.bytes : 16ull << 30;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t r) {
  return r == NVML_SUCCESS ? "Success" : "Error";
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  *count = DeviceCount();
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(
    unsigned index, nvmlDevice_t* device) {
  if (index >= DeviceCount()) return NVML_ERROR_INVALID_ARGUMENT;
  g_devices[index].index = index;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid,
                                                                      unsigned length) {
  std::snprintf(uuid, length, "GPU-7e570000-0000-4000-8000-%012u", d->index);
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char* name,
                                                                      unsigned length) {
  std::snprintf(name, length, "gslice test GPU");
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t,
                                                                            nvmlMemory_t* m) {
  m->total = Memory();
  const char* used = std::getenv("GSLICE_TEST_NVML_USED");
  m->used = used ? std::strtoull(used, nullptr, 10) : 0;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(
    nvmlDevice_t d, nvmlUtilization_t* u) {
  u->gpu = 10 * (d->index + 1);
  u->memory = 0;
  return NVML_SUCCESS;
}

}  // extern "C"
