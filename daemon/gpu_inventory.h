// The node's GPUs, read through NVML. gsliced never links NVML: it dlopens the library
// (the real driver's, or the simulated one in tests) so the same binary runs on any node
// and says clearly when there is no driver.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model.h"
#include "status.h"

namespace gslice {

// A source of GPU facts. The NVML one is the real thing; tests may supply their own.
class GpuInventory {
 public:
  virtual ~GpuInventory() = default;
  // Every GPU with its current memory use and utilisation.
  virtual Result<std::vector<GpuInfo>> Scan() = 0;
  // Pids NVML sees on a GPU with the memory each uses (a process outside any slice shows
  // here and not in the ledger).
  virtual Result<std::vector<ProcessUsage>> Processes(const std::string& uuid) = 0;
};

// Opens `library` (a soname like "libnvidia-ml.so.1" or a path) and initialises NVML.
Result<std::unique_ptr<GpuInventory>> OpenNvmlInventory(const std::string& library);

}  // namespace gslice
