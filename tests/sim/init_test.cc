// Initialisation, devices, visible devices, contexts: the driver's answers and error codes.
#include <unistd.h>

#include <cstring>

#include "sim_test.h"

namespace gslice::test {
namespace {

std::string UuidOf(int ordinal) {
  CUdevice dev;
  CUuuid u;
  if (cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS || cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
    return "";
  }
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

using InitTest = SimTest;

TEST_F(InitTest, CallsBeforeCuInitReturnNotInitialized) {
  Child child({Worker(), "preinit"});
  std::string out;
  EXPECT_EQ(child.Wait(&out), 0);
  EXPECT_NE(out.find("count_before_init CUDA_ERROR_NOT_INITIALIZED"), std::string::npos) << out;
  EXPECT_NE(out.find("alloc_before_init CUDA_ERROR_NOT_INITIALIZED"), std::string::npos) << out;
  EXPECT_NE(out.find("init CUDA_SUCCESS"), std::string::npos) << out;
}

TEST_F(InitTest, CuInitRejectsFlags) { EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuInit(1)); }

TEST_F(InitTest, DriverVersionIsCuda13) {
  int v = 0;
  CHECK_CU(cuDriverGetVersion(&v));
  EXPECT_EQ(v, 13000);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(nullptr));
}

TEST_F(InitTest, DevicesFollowTheConfiguration) {
  int count = 0;
  CHECK_CU(cuDeviceGetCount(&count));
  ASSERT_EQ(count, 2);
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, i));
    char name[128];
    CHECK_CU(cuDeviceGetName(name, sizeof name, dev));
    EXPECT_STREQ(name, "gslice simulated GPU");
    size_t total = 0;
    CHECK_CU(cuDeviceTotalMem(&total, dev));
    EXPECT_EQ(total, 1024 * kMiB);
    int v = 0;
    CHECK_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    EXPECT_EQ(v, 132);
    CHECK_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    EXPECT_EQ(v, 9);
    CHECK_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    EXPECT_EQ(v, 0);
    char bus[32];
    CHECK_CU(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
    CUdevice back = -1;
    CHECK_CU(cuDeviceGetByPCIBusId(&back, bus));
    EXPECT_EQ(back, dev);
  }
  EXPECT_NE(UuidOf(0), UuidOf(1));
  CUdevice dev;
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&dev, 2));
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&dev, -1));
  int v;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE,
            cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 7));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetName(nullptr, 10, 0));
}

TEST_F(InitTest, AnotherProcessSeesTheSameDevices) {
  Child child({Worker(), "devices"});
  std::string out;
  ASSERT_EQ(child.Wait(&out), 0);
  const int count = DeviceCount();
  EXPECT_NE(out.find("count " + std::to_string(count) + "\n"), std::string::npos) << out;
  for (int i = 0; i < count; ++i) {
    size_t total = 0;
    CHECK_CU(cuDeviceTotalMem(&total, i));
    EXPECT_NE(out.find("device " + std::to_string(i) + " " + UuidOf(i) + " " + std::to_string(total)),
              std::string::npos)
        << out;
  }
  if (OnSim()) {
    EXPECT_EQ(count, 2);  // the sim's default node
  }
}

TEST_F(InitTest, CudaVisibleDevicesSelectsAndOrders) {
  const std::string u0 = UuidOf(0), u1 = UuidOf(1);
  struct Case {
    std::string visible;
    std::string expect;  // the lines that must appear
    std::string count;
  };
  const Case cases[] = {
      {"1", "device 0 " + u1, "count 1"},
      {"1,0", "device 0 " + u1, "count 2"},
      {u1.substr(0, 12), "device 0 " + u1, "count 1"},
      {u0, "device 0 " + u0, "count 1"},
      {"0,7,1", "device 0 " + u0, "count 1"},  // the list ends at the first unknown entry
      {"1,1", "device 0 " + u1, "count 1"},    // ... or at a repeated one
  };
  for (const Case& c : cases) {
    Child child({Worker(), "devices"}, {"CUDA_VISIBLE_DEVICES=" + c.visible});
    std::string out;
    ASSERT_EQ(child.Wait(&out), 0);
    EXPECT_NE(out.find(c.count + "\n"), std::string::npos) << c.visible << ": " << out;
    EXPECT_NE(out.find(c.expect), std::string::npos) << c.visible << ": " << out;
  }
  Child none({Worker(), "devices"}, {"CUDA_VISIBLE_DEVICES="});
  std::string out;
  ASSERT_EQ(none.Wait(&out), 0);
  EXPECT_NE(out.find("init CUDA_ERROR_NO_DEVICE"), std::string::npos) << out;
}

TEST_F(InitTest, ConfigurationComesFromTheEnvironmentOfTheFirstProcess) {
  const std::string state = UniqueSimStatePath("config");
  Child child({Worker(), "devices"},
              {"GSLICE_SIM_STATE=" + state, "GSLICE_SIM_DEVICES=3",
               "GSLICE_SIM_MEMORY=1GiB,2GiB,512MiB",
               "GSLICE_SIM_UUIDS=GPU-00000000-0000-0000-0000-000000000001,"
               "GPU-00000000-0000-0000-0000-000000000002,GPU-abcdef01-2345-6789-abcd-ef0123456789"});
  std::string out;
  ASSERT_EQ(child.Wait(&out), 0);
  EXPECT_NE(out.find("count 3"), std::string::npos) << out;
  EXPECT_NE(out.find("device 1 GPU-00000000-0000-0000-0000-000000000002 2147483648"),
            std::string::npos) << out;
  EXPECT_NE(out.find("device 2 GPU-abcdef01-2345-6789-abcd-ef0123456789 536870912 mps 0"),
            std::string::npos) << out;
  // A later process with other settings joins the existing node.
  Child later({Worker(), "devices"}, {"GSLICE_SIM_STATE=" + state, "GSLICE_SIM_DEVICES=1"});
  std::string out2;
  ASSERT_EQ(later.Wait(&out2), 0);
  EXPECT_NE(out2.find("count 3"), std::string::npos) << out2;
  unlink(state.c_str());
}

TEST_F(InitTest, MpsIsANodeSetting) {
  const std::string state = UniqueSimStatePath("mps");
  Child child({Worker(), "devices"}, {"GSLICE_SIM_STATE=" + state, "GSLICE_SIM_DEVICES=2", "GSLICE_SIM_MPS=25"});
  std::string out;
  ASSERT_EQ(child.Wait(&out), 0);
  EXPECT_NE(out.find("device 0 GPU-"), std::string::npos) << out;
  EXPECT_EQ(out.find("mps 0"), std::string::npos) << out;
  EXPECT_NE(out.find("mps 1"), std::string::npos) << out;
  unlink(state.c_str());
  const std::string bad = UniqueSimStatePath("badmps");
  Child refused({Worker(), "devices"}, {"GSLICE_SIM_STATE=" + bad, "GSLICE_SIM_MPS=some"});
  std::string out2;
  ASSERT_EQ(refused.Wait(&out2), 0);
  EXPECT_NE(out2.find("GSLICE_SIM_MPS=some"), std::string::npos) << out2;
  EXPECT_EQ(out2.find("init CUDA_SUCCESS"), std::string::npos) << out2;
  unlink(bad.c_str());
}

TEST_F(InitTest, BadConfigurationIsReportedAndInitFails) {
  const std::string state = UniqueSimStatePath("badconfig");
  Child child({Worker(), "devices"}, {"GSLICE_SIM_STATE=" + state, "GSLICE_SIM_MEMORY=lots"});
  std::string out;
  ASSERT_EQ(child.Wait(&out), 0);
  EXPECT_NE(out.find("GSLICE_SIM_MEMORY=lots"), std::string::npos) << out;
  EXPECT_EQ(out.find("init CUDA_SUCCESS"), std::string::npos) << out;
  unlink(state.c_str());
}

TEST_F(InitTest, PrimaryContextRefcountAndState) {
  // Device 1's primary context is not held by the fixture, unlike device 0's.
  if (DeviceCount() < 2) GTEST_SKIP() << "needs a second device";
  unsigned flags = 99;
  int active = -1;
  CHECK_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 0);
  CHECK_CU(cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_BLOCKING_SYNC));
  CUcontext a, b;
  CHECK_CU(cuDevicePrimaryCtxRetain(&a, 1));
  CHECK_CU(cuDevicePrimaryCtxRetain(&b, 1));
  EXPECT_EQ(a, b);
  CHECK_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 1);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_CTX_SCHED_BLOCKING_SYNC));
  CHECK_CU(cuDevicePrimaryCtxRelease(1));
  CHECK_CU(cuDevicePrimaryCtxRelease(1));
  CHECK_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 0);
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuDevicePrimaryCtxRelease(1));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxSetFlags(1, 0x10000));
}

TEST_F(InitTest, ContextStack) {
  const CUdevice other = DeviceCount() > 1 ? 1 : 0;
  CUcontext created = nullptr, cur = nullptr;
  CHECK_CU(cuCtxCreate(&created, nullptr, 0, other));
  CHECK_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, created);
  CUdevice d = -1;
  CHECK_CU(cuCtxGetDevice(&d));
  EXPECT_EQ(d, other);
  CUcontext popped = nullptr;
  CHECK_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, created);
  CHECK_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, ctx_);
  CHECK_CU(cuCtxPushCurrent(created));
  CHECK_CU(cuCtxDestroy(created));
  CHECK_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, ctx_);
  // (A destroyed context's handle is not used again: the driver leaves that undefined.)
  // With no context current, context calls fail as the driver's do.
  CHECK_CU(cuCtxPopCurrent(&popped));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent(&popped));
  CUdeviceptr p;
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc(&p, 16));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxSynchronize());
  CHECK_CU(cuCtxSetCurrent(ctx_));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuCtxCreate(&created, nullptr, 0x1000, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuCtxCreate(&created, nullptr, 0, 5));
}

TEST_F(InitTest, ErrorNamesAndStrings) {
  const char* s = nullptr;
  CHECK_CU(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  EXPECT_STREQ(s, "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  EXPECT_STREQ(s, "out of memory");
  CHECK_CU(cuGetErrorName(CUDA_ERROR_ILLEGAL_STATE, &s));
  EXPECT_STREQ(s, "CUDA_ERROR_ILLEGAL_STATE");
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGetErrorName(static_cast<CUresult>(555), &s));
  EXPECT_EQ(s, nullptr);
}

}  // namespace
}  // namespace gslice::test
