// Helpers shared by gslice's test suites.
//
// The same test binary runs on the simulated driver (LD_LIBRARY_PATH=<build>/lib/sim) and
// on a real GPU: LoadTestKernels() loads the PTX of test_kernels.cu when the driver takes
// it and the sim's own image otherwise.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace gslice::test {

// Name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"), or its number when the driver has none.
std::string CuName(CUresult r);

// Loads the test kernels: gslice_busy(uint64_t microseconds) and
// gslice_fill(uint32_t* dst, uint32_t pattern, uint64_t count). REQUIRES: a current context.
CUresult LoadTestKernels(CUmodule* module, CUfunction* busy, CUfunction* fill);

// The sim's module image holding the test kernels.
const char* SimTestImage();
// The embedded PTX of the test kernels ("" when the build had no nvcc).
const char* TestKernelsPtx();

// cuInit, then device `ordinal`'s primary context retained and made current (benchmarks).
CUresult UsePrimaryContext(int ordinal, CUdevice* dev, CUcontext* ctx);
// The median of v (0 where v is empty).
double Median(std::vector<double> v);

// Launches gslice_busy / gslice_fill with the shapes they expect.
CUresult LaunchBusy(CUfunction busy, uint64_t microseconds, CUstream stream);
CUresult LaunchFill(CUfunction fill, CUdeviceptr dst, uint32_t pattern, uint64_t count,
                    CUstream stream);

// A per-process simulator state path: /dev/shm/gslice-test-<pid>-<name>. The file is
// removed when the process exits.
std::string UniqueSimStatePath(const std::string& name);
// Points GSLICE_SIM_STATE at UniqueSimStatePath(name) unless this process already did, and
// sets the simulated node's shape for tests (GSLICE_SIM_DEVICES=2, GSLICE_SIM_MEMORY=1GiB)
// unless the environment already says otherwise. Call before cuInit.
void UseUniqueSimState(const std::string& name);

// A child process with its stdin and stdout/stderr connected to pipes.
class Child {
 public:
  // Starts argv[0] (a path) with the current environment, plus `env` ("NAME=value",
  // overriding), minus the variables named in `unset`.
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
        const std::vector<std::string>& unset = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Reads one line of the child's output (without the newline); false on EOF or timeout.
  bool ReadLine(std::string* line, int timeout_ms = 20000);
  // Reads lines until one starts with prefix; returns it (or "" on EOF/timeout).
  std::string ReadUntil(const std::string& prefix, int timeout_ms = 20000);
  void WriteLine(const std::string& line);
  void Kill(int sig);
  // Waits for exit; returns the exit code, or 128+signal. All remaining output goes to
  // `rest` when given.
  int Wait(std::string* rest = nullptr, int timeout_ms = 30000);

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  bool waited_ = false;
  int status_ = 0;
};

// Path of a program built next to the running test binary.
std::string SiblingProgram(const std::string& name);

}  // namespace gslice::test

// Asserts that a driver call succeeds, naming the error when it does not.
#define CHECK_CU(expr)                                                          \
  do {                                                                          \
    CUresult check_cu_r_ = (expr);                                              \
    ASSERT_EQ(check_cu_r_, CUDA_SUCCESS)                                        \
        << #expr << " -> " << ::gslice::test::CuName(check_cu_r_);              \
  } while (0)

// Expects a driver call to return `expected`.
#define EXPECT_CU(expected, expr)                                               \
  do {                                                                          \
    CUresult expect_cu_r_ = (expr);                                             \
    EXPECT_EQ(expect_cu_r_, (expected))                                         \
        << #expr << " -> " << ::gslice::test::CuName(expect_cu_r_) << ", expected " \
        << ::gslice::test::CuName(expected);                                    \
  } while (0)
