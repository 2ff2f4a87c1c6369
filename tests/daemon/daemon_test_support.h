// Helpers for gsliced's tests: a GPU inventory with fixed GPUs, unique temp paths, a free
// loopback port and reading a whole file.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
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

// A program under `gslice run`, talked to through its stdin and stdout (client watch).
class Program {
 public:
  explicit Program(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Program() { Stop(); }

  // The next line it prints, "" when none comes within 10 s (or it exited).
  std::string ReadLine() {
    for (;;) {
      size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) return "";
      char buf[256];
      ssize_t n = read(from_, buf, sizeof buf);
      if (n <= 0) return "";
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }
  std::string Ask(const std::string& command) {
    std::string line = command + "\n";
    if (write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    return ReadLine();
  }
  // Closes its stdin and waits for it; returns its exit status (-1 when it did not start).
  int Stop() {
    if (to_ >= 0) close(to_);
    to_ = -1;
    if (from_ >= 0) close(from_);
    from_ = -1;
    if (pid_ <= 0) return -1;
    int status = 0;
    for (int i = 0; i < 200 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
};

}  // namespace gslice::testing
