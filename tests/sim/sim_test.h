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

  size_t FreeMemory() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
    return free_bytes;
  }

  static std::string Worker() { return SiblingProgram("sim_worker"); }

  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction busy_ = nullptr;
  CUfunction fill_ = nullptr;
};

}  // namespace gslice::test
