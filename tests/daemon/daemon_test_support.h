// Helpers for gsliced's in-process tests: a GPU inventory with fixed GPUs and unique temp
// paths.
#pragma once

#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "gpu_inventory.h"

namespace gslice::testing {

class FixedInventory final : public GpuInventory {
 public:
  explicit FixedInventory(std::vector<GpuInfo> gpus) : gpus_(std::move(gpus)) {}
  Result<std::vector<GpuInfo>> Scan() override { return gpus_; }
  Result<std::vector<ProcessUsage>> Processes(const std::string&) override {
    return std::vector<ProcessUsage>{};
  }

 private:
  std::vector<GpuInfo> gpus_;
};

inline constexpr uint64_t kGiB = 1ull << 30;

inline std::vector<GpuInfo> TestGpus() {
  return {GpuInfo{0, "GPU-7e570000-0000-4000-8000-000000000000", "test", 16 * kGiB, kGiB, 0.1},
          GpuInfo{1, "GPU-7e570000-0000-4000-8000-000000000001", "test", 16 * kGiB, 0, 0.2}};
}

// "/dev/shm/gslice-test-<pid>-<n>-<what>", unique per call.
inline std::string UniquePath(const std::string& what, const std::string& dir = "/dev/shm") {
  static std::atomic<int> n{0};
  return dir + "/gslice-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + "-" + what;
}

}  // namespace gslice::testing
