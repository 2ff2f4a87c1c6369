// The simulated NVML: devices, memory, processes and utilisation as other processes see them.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "nvml_sim.h"
#include "sim_test.h"

namespace gslice::test {
namespace {

using NvmlTest = SimTest;

std::vector<nvmlProcessInfo_t> Processes(Nvml& nvml, nvmlDevice_t dev) {
  unsigned count = 0;
  nvmlReturn_t r = nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, nullptr);
  EXPECT_TRUE(r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE) << r;
  std::vector<nvmlProcessInfo_t> infos(count + 4);
  count = static_cast<unsigned>(infos.size());
  EXPECT_EQ(nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos.data()), NVML_SUCCESS);
  infos.resize(count);
  return infos;
}

TEST_F(NvmlTest, DevicesAndErrors) {
  Nvml nvml;
  ASSERT_NE(nvml.lib, nullptr) << dlerror();
  unsigned count = 0;
  EXPECT_EQ(nvml.nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(nvml.nvmlInit_v2(), NVML_SUCCESS);
  ASSERT_EQ(nvml.nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, static_cast<unsigned>(DeviceCount()));
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  EXPECT_EQ(nvml.nvmlSystemGetDriverVersion(version, sizeof version), NVML_SUCCESS);
  EXPECT_EQ(nvml.nvmlSystemGetDriverVersion(version, 2), NVML_ERROR_INSUFFICIENT_SIZE);
  int cuda = 0;
  EXPECT_EQ(nvml.nvmlSystemGetCudaDriverVersion_v2(&cuda), NVML_SUCCESS);
  EXPECT_EQ(cuda, 13000);
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev;
    ASSERT_EQ(nvml.nvmlDeviceGetHandleByIndex_v2(i, &dev), NVML_SUCCESS);
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    ASSERT_EQ(nvml.nvmlDeviceGetName(dev, name, sizeof name), NVML_SUCCESS);
    char cu_name[256];
    CHECK_CU(cuDeviceGetName(cu_name, sizeof cu_name, static_cast<CUdevice>(i)));
    EXPECT_STREQ(name, cu_name);  // on the sim: "gslice simulated GPU"
    ASSERT_EQ(nvml.nvmlDeviceGetUUID(dev, uuid, sizeof uuid), NVML_SUCCESS);
    // The same UUID as the driver's.
    CUuuid cu;
    CHECK_CU(cuDeviceGetUuid(&cu, static_cast<CUdevice>(i)));
    char expect[8];
    std::snprintf(expect, sizeof expect, "%02x%02x", static_cast<unsigned char>(cu.bytes[0]),
                  static_cast<unsigned char>(cu.bytes[1]));
    EXPECT_EQ(std::string(uuid).substr(4, 4), expect);
    nvmlDevice_t by_uuid;
    ASSERT_EQ(nvml.nvmlDeviceGetHandleByUUID(uuid, &by_uuid), NVML_SUCCESS);
    EXPECT_EQ(by_uuid, dev);
    unsigned index = 99;
    ASSERT_EQ(nvml.nvmlDeviceGetIndex(dev, &index), NVML_SUCCESS);
    EXPECT_EQ(index, i);
    nvmlPciInfo_t pci;
    ASSERT_EQ(nvml.nvmlDeviceGetPciInfo_v3(dev, &pci), NVML_SUCCESS);
    char cu_bus[32];
    CHECK_CU(cuDeviceGetPCIBusId(cu_bus, sizeof cu_bus, static_cast<CUdevice>(i)));
    EXPECT_EQ(pci.bus, std::strtoul(cu_bus + 5, nullptr, 16));
  }
  nvmlDevice_t dev;
  EXPECT_EQ(nvml.nvmlDeviceGetHandleByIndex_v2(5, &dev), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml.nvmlDeviceGetHandleByUUID("GPU-nope", &dev), NVML_ERROR_NOT_FOUND);
  EXPECT_STREQ(nvml.nvmlErrorString(NVML_ERROR_NOT_FOUND), "Not Found");
  EXPECT_EQ(nvml.nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(nvml.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

TEST_F(NvmlTest, MemoryAndProcessesFollowTheDriver) {
  Nvml nvml;
  ASSERT_NE(nvml.lib, nullptr) << dlerror();
  ASSERT_EQ(nvml.nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t dev;
  ASSERT_EQ(nvml.nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
  nvmlMemory_t before;
  ASSERT_EQ(nvml.nvmlDeviceGetMemoryInfo(dev, &before), NVML_SUCCESS);
  EXPECT_EQ(before.total, 1024 * kMiB);

  Child child({Worker(), "hold", "0", std::to_string(256 * kMiB), "7"});
  ASSERT_EQ(child.ReadUntil("ready"), "ready " + std::to_string(child.pid()));
  nvmlMemory_t with;
  ASSERT_EQ(nvml.nvmlDeviceGetMemoryInfo(dev, &with), NVML_SUCCESS);
  EXPECT_EQ(with.used, before.used + 256 * kMiB);
  EXPECT_EQ(with.free + with.used, with.total);
  nvmlMemory_v2_t v2{};
  v2.version = nvmlMemory_v2;
  ASSERT_EQ(nvml.nvmlDeviceGetMemoryInfo_v2(dev, &v2), NVML_SUCCESS);
  EXPECT_EQ(v2.used, with.used);
  v2.version = 1;
  EXPECT_EQ(nvml.nvmlDeviceGetMemoryInfo_v2(dev, &v2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  bool listed = false;
  for (const nvmlProcessInfo_t& p : Processes(nvml, dev)) {
    if (p.pid == static_cast<unsigned>(child.pid())) {
      listed = true;
      EXPECT_EQ(p.usedGpuMemory, 256 * kMiB);
    }
  }
  EXPECT_TRUE(listed);
  unsigned none = 0;
  EXPECT_EQ(nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, &none, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_GE(none, 1u);

  child.Kill(SIGKILL);
  child.Wait();
  for (const nvmlProcessInfo_t& p : Processes(nvml, dev)) {
    EXPECT_NE(p.pid, static_cast<unsigned>(child.pid()));
  }
  nvmlMemory_t after;
  ASSERT_EQ(nvml.nvmlDeviceGetMemoryInfo(dev, &after), NVML_SUCCESS);
  EXPECT_EQ(after.used, before.used);
  nvml.nvmlShutdown();
}

TEST_F(NvmlTest, StateToolShowsTheNode) {
  Child child({Worker(), "hold", "1", std::to_string(96 * kMiB), "3"});
  ASSERT_EQ(child.ReadUntil("ready"), "ready " + std::to_string(child.pid()));
  Child tool({SiblingProgram("gslice-sim-state")});
  std::string out;
  ASSERT_EQ(tool.Wait(&out), 0) << out;
  const size_t dev1 = out.find("device 1");
  ASSERT_NE(dev1, std::string::npos) << out;
  EXPECT_NE(out.find("pid " + std::to_string(child.pid()), dev1), std::string::npos) << out;
  EXPECT_NE(out.find("96 MiB", dev1), std::string::npos) << out;
}

TEST_F(NvmlTest, UtilizationFollowsBusyKernels) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs a second, idle device to compare with";
  Nvml nvml;
  ASSERT_NE(nvml.lib, nullptr) << dlerror();
  ASSERT_EQ(nvml.nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t dev0, dev1;
  ASSERT_EQ(nvml.nvmlDeviceGetHandleByIndex_v2(0, &dev0), NVML_SUCCESS);
  ASSERT_EQ(nvml.nvmlDeviceGetHandleByIndex_v2(1, &dev1), NVML_SUCCESS);
  // Keep device 0 busy for ~1.5 s, then read both devices side by side.
  for (int i = 0; i < 150; ++i) CHECK_CU(LaunchBusy(busy_, 10000, nullptr));
  usleep(1200000);
  nvmlUtilization_t busy{}, idle{};
  ASSERT_EQ(nvml.nvmlDeviceGetUtilizationRates(dev0, &busy), NVML_SUCCESS);
  ASSERT_EQ(nvml.nvmlDeviceGetUtilizationRates(dev1, &idle), NVML_SUCCESS);
  CHECK_CU(cuCtxSynchronize());
  EXPECT_GE(busy.gpu, 50u);
  EXPECT_EQ(idle.gpu, 0u);
  nvml.nvmlShutdown();
}

}  // namespace
}  // namespace gslice::test
