// Helpers for gsliced's tests: a GPU inventory with fixed GPUs, unique temp paths, a free
// loopback port and reading a whole file.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
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

// Forks `gsliced --config DIR/gsliced.toml EXTRA...` (gsliced: its path), its stderr appended
// to DIR/gsliced.log. clear_preload: the child drops LD_PRELOAD (gsliced is not a shimmed
// program, whatever the test runs under). Returns the child's pid.
inline pid_t SpawnGsliced(const char* gsliced, const std::string& dir, const std::vector<std::string>& extra = {},
                          bool clear_preload = false) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (clear_preload) unsetenv("LD_PRELOAD");
    if (freopen((dir + "/gsliced.log").c_str(), "a", stderr) == nullptr) _exit(126);
    std::vector<std::string> args = {gsliced, "--config", dir + "/gsliced.toml"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Polls answers() every 50 ms, 200 times: success once it holds; a failure with gsliced's log
// if gsliced (*pid) exits first (then *pid is -1) or never answers.
inline ::testing::AssertionResult AwaitGsliced(pid_t* pid, const std::string& dir, const std::function<bool()>& answers) {
  for (int i = 0; i < 200; ++i) {
    if (answers()) return ::testing::AssertionSuccess();
    int status = 0;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      *pid = -1;
      return ::testing::AssertionFailure() << "gsliced exited: " << ReadAll(dir + "/gsliced.log");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ::testing::AssertionFailure() << "gsliced did not answer: " << ReadAll(dir + "/gsliced.log");
}

}  // namespace gslice::testing
