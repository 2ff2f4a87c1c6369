#include "gpu_query.h"

#include <dlfcn.h>
#include <stdio.h>

namespace gslice::cli {
namespace {
// The few driver entry points used, declared by hand so no CUDA header or library is needed.
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceTotalMem = int (*)(size_t*, int);
using CuDeviceGetUuid = int (*)(unsigned char*, int);
}  // namespace

bool QueryGpus(const std::string& driver_path, std::vector<GpuInfo>* gpus, std::string* loaded_path,
               std::string* error) {
  void* h = dlopen(driver_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    *error = "cannot load the CUDA driver " + driver_path + (why != nullptr ? std::string(": ") + why : "");
    return false;
  }
  auto init = reinterpret_cast<CuInit>(dlsym(h, "cuInit"));
  auto count_fn = reinterpret_cast<CuDeviceGetCount>(dlsym(h, "cuDeviceGetCount"));
  auto get = reinterpret_cast<CuDeviceGet>(dlsym(h, "cuDeviceGet"));
  auto name_fn = reinterpret_cast<CuDeviceGetName>(dlsym(h, "cuDeviceGetName"));
  auto total_fn = reinterpret_cast<CuDeviceTotalMem>(dlsym(h, "cuDeviceTotalMem_v2"));
  auto uuid_fn = reinterpret_cast<CuDeviceGetUuid>(dlsym(h, "cuDeviceGetUuid"));
  if (init == nullptr || count_fn == nullptr || get == nullptr || name_fn == nullptr || total_fn == nullptr ||
      uuid_fn == nullptr) {
    *error = driver_path + " is not a CUDA driver (missing entry points)";
    return false;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(init), &info) != 0 && info.dli_fname != nullptr) *loaded_path = info.dli_fname;
  int r = init(0);
  if (r == 100) {  // CUDA_ERROR_NO_DEVICE
    return true;   // no GPUs: an empty list
  }
  if (r != 0) {
    *error = "cuInit failed with CUDA error " + std::to_string(r) + " (driver " + *loaded_path + ")";
    return false;
  }
  int n = 0;
  if (count_fn(&n) != 0) {
    *error = "cuDeviceGetCount failed";
    return false;
  }
  for (int i = 0; i < n; ++i) {
    int dev = 0;
    if (get(&dev, i) != 0) continue;
    GpuInfo g;
    g.ordinal = i;
    char name[256] = {};
    if (name_fn(name, sizeof name, dev) == 0) g.name = name;
    size_t total = 0;
    if (total_fn(&total, dev) == 0) g.total = total;
    unsigned char u[16] = {};
    if (uuid_fn(u, dev) == 0) {
      char text[64];
      snprintf(text, sizeof text,
               "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
               u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
      g.uuid = text;
    }
    gpus->push_back(g);
  }
  return true;
}

}  // namespace gslice::cli
