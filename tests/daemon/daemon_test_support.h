// Helpers for gsliced's tests: a GPU inventory with fixed GPUs, unique temp paths, a free
// loopback port and reading a whole file.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
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

// A TCP port on 127.0.0.1 that was free a moment ago (for a gsliced the test starts).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gslice::testing
