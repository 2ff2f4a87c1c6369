#include "test_support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "gslice/clock.h"

extern char** environ;

namespace gslice::test {

extern const char kTestKernelsPtx[];

namespace {

constexpr char kSimImage[] =
    "gslice-sim-module 1\n"
    "# the test kernels of tests/support/test_kernels.cu\n"
    "kernel gslice_busy busy\n"
    "kernel gslice_fill fill\n";

std::string g_state_path;

void RemoveState() {
  if (!g_state_path.empty()) unlink(g_state_path.c_str());
}

}  // namespace

std::string CuName(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

const char* SimTestImage() { return kSimImage; }
const char* TestKernelsPtx() { return kTestKernelsPtx; }

CUresult LoadTestKernels(CUmodule* module, CUfunction* busy, CUfunction* fill) {
  CUresult r = CUDA_ERROR_INVALID_IMAGE;
  if (kTestKernelsPtx[0] != '\0') r = cuModuleLoadData(module, kTestKernelsPtx);
  if (r != CUDA_SUCCESS) r = cuModuleLoadData(module, kSimImage);
  if (r != CUDA_SUCCESS) return r;
  r = cuModuleGetFunction(busy, *module, "gslice_busy");
  if (r != CUDA_SUCCESS) return r;
  return cuModuleGetFunction(fill, *module, "gslice_fill");
}

CUresult LaunchBusy(CUfunction busy, uint64_t microseconds, CUstream stream) {
  void* args[] = {&microseconds};
  return cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr);
}

CUresult UsePrimaryContext(int ordinal, CUdevice* dev, CUcontext* ctx) {
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGet(dev, ordinal);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(ctx, *dev);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(*ctx);
  return r;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

CUresult LaunchFill(CUfunction fill, CUdeviceptr dst, uint32_t pattern, uint64_t count,
                    CUstream stream) {
  void* args[] = {&dst, &pattern, &count};
  return cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, stream, args, nullptr);
}

std::string UniqueSimStatePath(const std::string& name) {
  return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-" + name;
}

void UseUniqueSimState(const std::string& name) {
  static std::once_flag once;
  std::call_once(once, [&] {
    g_state_path = UniqueSimStatePath(name);
    setenv("GSLICE_SIM_STATE", g_state_path.c_str(), 1);
    setenv("GSLICE_SIM_DEVICES", "2", 0);
    setenv("GSLICE_SIM_MEMORY", "1GiB", 0);
    std::atexit(RemoveState);
  });
}

std::string SiblingProgram(const std::string& name) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return name;
  buf[n] = '\0';
  std::string self = buf;
  return self.substr(0, self.rfind('/') + 1) + name;
}

Child::Child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const std::vector<std::string>& unset) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
  // Build everything the child needs before fork: only async-signal-safe calls after it.
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool drop = false;
    for (const std::string& u : unset) drop = drop || u == key;
    for (const std::string& o : env) drop = drop || o.substr(0, o.find('=')) == key;
    if (!drop) envs.push_back(kv);
  }
  for (const std::string& o : env) envs.push_back(o);
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  in_fd_ = in[1];
  out_fd_ = out[0];
}

Child::~Child() {
  if (pid_ > 0 && !waited_) {
    kill(pid_, SIGKILL);
    Wait(nullptr, 5000);
  }
  if (in_fd_ >= 0) close(in_fd_);
  if (out_fd_ >= 0) close(out_fd_);
}

bool Child::ReadLine(std::string* line, int timeout_ms) {
  const int64_t deadline = MonotonicMs() + timeout_ms;
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      *line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return true;
    }
    int64_t now = MonotonicMs();
    if (now >= deadline || out_fd_ < 0) return false;
    pollfd p{out_fd_, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(deadline - now));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    char buf[4096];
    ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

std::string Child::ReadUntil(const std::string& prefix, int timeout_ms) {
  const int64_t deadline = MonotonicMs() + timeout_ms;
  std::string line;
  while (MonotonicMs() < deadline) {
    if (!ReadLine(&line, static_cast<int>(deadline - MonotonicMs()))) return "";
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

void Child::WriteLine(const std::string& line) {
  std::string l = line + "\n";
  if (in_fd_ >= 0) {
    ssize_t n = write(in_fd_, l.data(), l.size());
    (void)n;
  }
}

void Child::Kill(int sig) {
  if (pid_ > 0 && !waited_) kill(pid_, sig);
}

int Child::Wait(std::string* rest, int timeout_ms) {
  if (pid_ <= 0) return -1;
  if (!waited_) {
    if (in_fd_ >= 0) {
      close(in_fd_);
      in_fd_ = -1;
    }
    const int64_t deadline = MonotonicMs() + timeout_ms;
    for (;;) {
      // Keep draining output so the child never blocks on a full pipe.
      std::string line;
      while (ReadLine(&line, 10)) {
        if (rest != nullptr) *rest += line + "\n";
      }
      pid_t r = waitpid(pid_, &status_, WNOHANG);
      if (r == pid_) break;
      if (MonotonicMs() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status_, 0);
        break;
      }
    }
    waited_ = true;
    std::string line;
    while (ReadLine(&line, 10)) {
      if (rest != nullptr) *rest += line + "\n";
    }
    if (rest != nullptr) *rest += buffer_;
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

}  // namespace gslice::test
