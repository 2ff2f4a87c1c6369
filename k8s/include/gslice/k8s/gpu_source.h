// Where the device plugin learns the node's GPUs and their health: NVML (the real driver's
// or the simulated libnvidia-ml.so.1), or a JSON file (tests, demos, nodes whose NVML the
// plugin must not load). Discover() is called at start and at every health poll.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gslice/k8s/resources.h"

namespace gslice::k8s {

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // The GPUs now, each with its health. False with *error when the source cannot be read at
  // all (the caller keeps its last list and marks every GPU unhealthy).
  virtual bool Discover(std::vector<GpuInfo>* gpus, std::string* error) = 0;
};

// A JSON file in the gslice.io/gpus annotation format:
// [{"uuid": "GPU-...", "index": 0, "memoryMiB": 81559, "model": "H100", "healthy": true}]
std::unique_ptr<GpuSource> MakeFileGpuSource(const std::string& path);

// No GPUs (a node that runs clients of remote GPUs only).
std::unique_ptr<GpuSource> MakeNoGpuSource();

// NVML loaded with dlopen from `library` ("libnvidia-ml.so.1" or an absolute path). A GPU
// is unhealthy when NVML stops answering for it.
std::unique_ptr<GpuSource> MakeNvmlGpuSource(const std::string& library);

}  // namespace gslice::k8s
