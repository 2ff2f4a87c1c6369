// Fixture for the sim suite: a per-process simulated node (2 devices of 1 GiB unless the
// environment says otherwise), the primary context of device 0 current, test kernels loaded.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <string>

#include "test_support.h"

namespace gslice::test {

inline constexpr size_t kMiB = 1ull << 20;

class SimTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    UseUniqueSimState("sim");
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }

  void SetUp() override {
    CHECK_CU(cuDeviceGet(&dev_, 0));
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
    CHECK_CU(cuCtxSetCurrent(ctx_));
    CHECK_CU(LoadTestKernels(&module_, &busy_, &fill_));
  }

  void TearDown() override {
    cuCtxSynchronize();
    cuModuleUnload(module_);
    cuDevicePrimaryCtxRelease(dev_);
  }


 public:
  static size_t FreeMemory() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
    return free_bytes;
  }

  static int DeviceCount() {
    int n = 0;
    EXPECT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
    return n;
  }

  // True on the simulated driver, false on a real one (the parity run); exact capacity
  // accounting is asserted only where it is the sim's by design.
  static bool OnSim() {
    char name[128] = {};
    return cuDeviceGetName(name, sizeof name, 0) == CUDA_SUCCESS &&
           std::string(name) == "gslice simulated GPU";
  }

  static size_t TotalMemory() {
    size_t total = 0;
    EXPECT_EQ(cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
    return total;
  }

 protected:
  static std::string Worker() { return SiblingProgram("sim_worker"); }

  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction busy_ = nullptr;
  CUfunction fill_ = nullptr;
};

// Free device memory is `expected`: exactly on the sim, whose accounting the interposer's
// tests rely on; within `slack` on a real driver, which rounds allocations up to its page
// size and pools to their chunk size.
#define EXPECT_FREE(expected, slack)                                                      \
  do {                                                                                    \
    const size_t expect_free_got_ = FreeMemory();                                         \
    const size_t expect_free_want_ = (expected);                                          \
    if (OnSim()) {                                                                        \
      EXPECT_EQ(expect_free_got_, expect_free_want_);                                     \
    } else {                                                                              \
      EXPECT_NEAR(static_cast<double>(expect_free_got_), static_cast<double>(expect_free_want_), \
                  static_cast<double>(slack));                                            \
    }                                                                                     \
  } while (0)

}  // namespace gslice::test
