#include "gslice/k8s/gpu_source.h"

#include <dlfcn.h>

#include <fstream>
#include <mutex>
#include <sstream>

#include "gslice/nvml_subset.h"

namespace gslice::k8s {

namespace {

class FileGpuSource final : public GpuSource {
 public:
  explicit FileGpuSource(std::string path) : path_(std::move(path)) {}
  bool Discover(std::vector<GpuInfo>* gpus, std::string* error) override {
    std::ifstream in(path_);
    if (!in) {
      *error = "cannot read GPU inventory file " + path_;
      return false;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto parsed = DecodeGpuInventory(ss.str(), error);
    if (!parsed) {
      *error = path_ + ": " + *error;
      return false;
    }
    *gpus = std::move(*parsed);
    return true;
  }

 private:
  std::string path_;
};

class NvmlGpuSource final : public GpuSource {
 public:
  explicit NvmlGpuSource(std::string library) : library_(std::move(library)) {}
  ~NvmlGpuSource() override {
    if (handle_) {
      if (shutdown_) shutdown_();
      dlclose(handle_);
    }
  }

  bool Discover(std::vector<GpuInfo>* gpus, std::string* error) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!handle_ && !Load(error)) return false;
    unsigned int count = 0;
    nvmlReturn_t rc = count_(&count);
    if (rc != NVML_SUCCESS) {
      *error = std::string("nvmlDeviceGetCount_v2: ") + error_string_(rc);
      return false;
    }
    std::vector<GpuInfo> out;
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      GpuInfo g;
      g.index = static_cast<int>(i);
      if (by_index_(i, &dev) != NVML_SUCCESS) {
        // Known before? Keep it, unhealthy, so pods see the loss rather than a renumbering.
        if (i < last_.size()) {
          g = last_[i];
          g.healthy = false;
          out.push_back(g);
        }
        continue;
      }
      char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
      nvmlMemory_t mem{};
      g.healthy = get_uuid_(dev, uuid, sizeof uuid) == NVML_SUCCESS &&
                  get_memory_(dev, &mem) == NVML_SUCCESS;
      if (get_name_(dev, name, sizeof name) == NVML_SUCCESS) g.model = name;
      int major = 0, minor = 0;
      if (get_cc_ && get_cc_(dev, &major, &minor) == NVML_SUCCESS)
        g.compute_capability = std::to_string(major) + "." + std::to_string(minor);
      g.uuid = uuid;
      g.memory_mib = static_cast<int64_t>(mem.total >> 20);
      if (g.uuid.empty() && i < last_.size()) g = last_[i], g.healthy = false;
      if (g.uuid.empty()) continue;
      out.push_back(g);
    }
    last_ = out;
    *gpus = std::move(out);
    return true;
  }

 private:
  template <typename F>
  bool Sym(const char* name, F* out, std::string* error) {
    *out = reinterpret_cast<F>(dlsym(handle_, name));
    if (!*out) *error = library_ + ": missing " + name;
    return *out != nullptr;
  }

  bool Load(std::string* error) {
    handle_ = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      *error = std::string("cannot load NVML: ") + dlerror();
      return false;
    }
    nvmlReturn_t (*init)(void) = nullptr;
    bool ok = Sym("nvmlInit_v2", &init, error) && Sym("nvmlShutdown", &shutdown_, error) &&
              Sym("nvmlErrorString", &error_string_, error) &&
              Sym("nvmlDeviceGetCount_v2", &count_, error) &&
              Sym("nvmlDeviceGetHandleByIndex_v2", &by_index_, error) &&
              Sym("nvmlDeviceGetUUID", &get_uuid_, error) && Sym("nvmlDeviceGetName", &get_name_, error) &&
              Sym("nvmlDeviceGetMemoryInfo", &get_memory_, error);
    // Optional: not every NVML (the simulated one) answers it.
    get_cc_ = reinterpret_cast<decltype(get_cc_)>(dlsym(handle_, "nvmlDeviceGetCudaComputeCapability"));
    if (ok) {
      nvmlReturn_t rc = init();
      if (rc != NVML_SUCCESS) {
        *error = std::string("nvmlInit_v2: ") + error_string_(rc);
        ok = false;
      }
    }
    if (!ok) {
      dlclose(handle_);
      handle_ = nullptr;
      shutdown_ = nullptr;
    }
    return ok;
  }

  std::string library_;
  std::mutex mu_;
  void* handle_ = nullptr;
  nvmlReturn_t (*shutdown_)(void) = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count_)(unsigned int*) = nullptr;
  nvmlReturn_t (*by_index_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_uuid_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*get_name_)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*get_memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*get_cc_)(nvmlDevice_t, int*, int*) = nullptr;
  std::vector<GpuInfo> last_;
};

}  // namespace

std::unique_ptr<GpuSource> MakeFileGpuSource(const std::string& path) {
  return std::make_unique<FileGpuSource>(path);
}

std::unique_ptr<GpuSource> MakeNvmlGpuSource(const std::string& library) {
  return std::make_unique<NvmlGpuSource>(library);
}

std::unique_ptr<GpuSource> MakeNoGpuSource() {
  class NoGpus final : public GpuSource {
   public:
    bool Discover(std::vector<GpuInfo>* gpus, std::string*) override {
      gpus->clear();
      return true;
    }
  };
  return std::make_unique<NoGpus>();
}

}  // namespace gslice::k8s
