#include "gpu_inventory.h"

#include <dlfcn.h>

#include "gslice/nvml_subset.h"

namespace gslice {
namespace {

class NvmlInventory final : public GpuInventory {
 public:
  ~NvmlInventory() override {
    if (shutdown_) shutdown_();
    // The library stays loaded: NVML does not promise that unloading is safe.
  }

  Status Load(const std::string& library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* err = dlerror();
      return Status::Unavailable("cannot load NVML (" + library + "): " + (err ? err : "?") +
                                 "; install the NVIDIA driver, or set nvml_library in the config");
    }
    bool ok = Sym("nvmlInit_v2", init_) && Sym("nvmlShutdown", shutdown_) &&
              Sym("nvmlErrorString", error_string_) &&
              Sym("nvmlDeviceGetCount_v2", get_count_) &&
              Sym("nvmlDeviceGetHandleByIndex_v2", get_handle_) &&
              Sym("nvmlDeviceGetUUID", get_uuid_) && Sym("nvmlDeviceGetName", get_name_) &&
              Sym("nvmlDeviceGetMemoryInfo", get_memory_);
    if (!ok) return Status::Unavailable("NVML (" + library + ") lacks " + missing_);
    Sym("nvmlDeviceGetUtilizationRates", get_utilization_);  // optional
    Sym("nvmlDeviceGetComputeRunningProcesses_v3", get_processes_);  // optional
    Sym("nvmlDeviceGetComputeMode", get_compute_mode_);  // optional: unknown without it
    nvmlReturn_t rc = init_();
    if (rc != NVML_SUCCESS) {
      shutdown_ = nullptr;
      return Status::Unavailable("NVML init failed: " + Error(rc));
    }
    return Status::Ok();
  }

  Result<std::vector<GpuInfo>> Scan() override {
    unsigned count = 0;
    nvmlReturn_t rc = get_count_(&count);
    if (rc != NVML_SUCCESS) return Status::Unavailable("NVML device count: " + Error(rc));
    std::vector<GpuInfo> out;
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      if ((rc = get_handle_(i, &dev)) != NVML_SUCCESS) {
        return Status::Unavailable("NVML GPU " + std::to_string(i) + ": " + Error(rc));
      }
      GpuInfo g;
      g.index = i;
      char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      if ((rc = get_uuid_(dev, buf, sizeof buf)) != NVML_SUCCESS) {
        return Status::Unavailable("NVML GPU " + std::to_string(i) + " UUID: " + Error(rc));
      }
      g.uuid = buf;
      char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
      if (get_name_(dev, name, sizeof name) == NVML_SUCCESS) g.name = name;
      nvmlMemory_t mem{};
      if ((rc = get_memory_(dev, &mem)) != NVML_SUCCESS) {
        return Status::Unavailable("NVML GPU " + std::to_string(i) + " memory: " + Error(rc));
      }
      g.memory_total = mem.total;
      g.memory_used = mem.used;
      nvmlUtilization_t util{};
      if (get_utilization_ && get_utilization_(dev, &util) == NVML_SUCCESS) {
        g.utilization = util.gpu / 100.0;
      }
      nvmlComputeMode_t mode{};
      if (get_compute_mode_ && get_compute_mode_(dev, &mode) == NVML_SUCCESS) g.compute_mode = static_cast<int>(mode);
      out.push_back(std::move(g));
    }
    return out;
  }

  Result<std::vector<ProcessUsage>> Processes(const std::string& uuid) override {
    std::vector<ProcessUsage> out;
    if (!get_processes_) return out;
    unsigned count = 0;
    if (get_count_(&count) != NVML_SUCCESS) return out;
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      if (get_handle_(i, &dev) != NVML_SUCCESS || get_uuid_(dev, buf, sizeof buf) != NVML_SUCCESS ||
          uuid != buf) {
        continue;
      }
      nvmlProcessInfo_t infos[256];
      unsigned n = 256;
      nvmlReturn_t rc = get_processes_(dev, &n, infos);
      if (rc != NVML_SUCCESS) return Status::Unavailable("NVML processes: " + Error(rc));
      for (unsigned k = 0; k < n && k < 256; ++k) {
        ProcessUsage p;
        p.pid = static_cast<int>(infos[k].pid);
        p.gpu_uuid = uuid;
        p.memory_used = infos[k].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE ? 0 : infos[k].usedGpuMemory;
        out.push_back(p);
      }
    }
    return out;
  }

 private:
  template <typename F>
  bool Sym(const char* name, F& fn) {
    fn = reinterpret_cast<F>(dlsym(handle_, name));
    if (fn == nullptr && missing_.empty()) missing_ = name;
    return fn != nullptr;
  }
  std::string Error(nvmlReturn_t rc) {
    const char* s = error_string_ ? error_string_(rc) : nullptr;
    return (s ? std::string(s) : "error") + " (" + std::to_string(static_cast<int>(rc)) + ")";
  }

  void* handle_ = nullptr;
  std::string missing_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*get_count_)(unsigned*) = nullptr;
  nvmlReturn_t (*get_handle_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_uuid_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*get_name_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*get_memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*get_utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*get_processes_)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;
  nvmlReturn_t (*get_compute_mode_)(nvmlDevice_t, nvmlComputeMode_t*) = nullptr;
};

}  // namespace

Result<std::unique_ptr<GpuInventory>> OpenNvmlInventory(const std::string& library) {
  auto inv = std::make_unique<NvmlInventory>();
  Status s = inv->Load(library);
  if (!s.ok()) return s;
  return std::unique_ptr<GpuInventory>(std::move(inv));
}

}  // namespace gslice
