// Asks a CUDA driver (real or simulated) which GPUs this process can see, through dlopen at
// run time: the CLI itself never links libcuda.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gslice::cli {

struct GpuInfo {
  int ordinal = 0;       // among the devices visible to this process
  std::string name;      // "NVIDIA H200"
  std::string uuid;      // "GPU-8c4a6e2f-1b3d-4f5a-9e8d-0123456789ab"
  uint64_t total = 0;    // bytes of device memory
};

// Loads driver_path (an absolute path, or "libcuda.so.1" to let the loader search), runs
// cuInit and lists the visible devices. On failure returns false with a message in *error.
// *loaded_path is the file the driver was loaded from.
bool QueryGpus(const std::string& driver_path, std::vector<GpuInfo>* gpus, std::string* loaded_path,
               std::string* error);

}  // namespace gslice::cli
