// Several processes on one simulated node: shared capacity, reclaim after SIGKILL, and
// time-slicing of the device between contexts of different processes.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

#include "sim_test.h"

namespace gslice::test {
namespace {

using MultiProcessTest = SimTest;

TEST_F(MultiProcessTest, ProcessesShareDeviceCapacity) {
  const size_t before = FreeMemory();
  Child holder({Worker(), "hold", "0", std::to_string(640 * kMiB), "0x1234"});
  ASSERT_EQ(holder.ReadUntil("ready"), "ready " + std::to_string(holder.pid()));
  EXPECT_EQ(FreeMemory(), before - 640 * kMiB);
  CUdeviceptr p;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, 512 * kMiB));
  // A second process hits the same wall ...
  Child second({Worker(), "hold", "0", std::to_string(512 * kMiB), "1"});
  std::string out;
  second.Wait(&out);
  EXPECT_NE(out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << out;
  // ... while the other device is untouched.
  Child other({Worker(), "hold", "1", std::to_string(512 * kMiB), "1"});
  EXPECT_EQ(other.ReadUntil("ready"), "ready " + std::to_string(other.pid()));
  holder.WriteLine("info");
  std::string info = holder.ReadUntil("info");
  EXPECT_EQ(info, "info CUDA_SUCCESS " + std::to_string(before - 640 * kMiB) + " " +
                      std::to_string(1024 * kMiB));
  holder.WriteLine("exit");
  EXPECT_EQ(holder.Wait(), 0);
  CHECK_CU(cuMemAlloc(&p, 512 * kMiB));
  CHECK_CU(cuMemFree(p));
}

TEST_F(MultiProcessTest, KilledProcessMemoryIsReclaimed) {
  const size_t before = FreeMemory();
  Child victim({Worker(), "hold", "0", std::to_string(900 * kMiB), "5"});
  ASSERT_EQ(victim.ReadUntil("ready"), "ready " + std::to_string(victim.pid()));
  if (OnSim()) {
    EXPECT_EQ(FreeMemory(), before - 900 * kMiB);
  } else {
    EXPECT_LE(FreeMemory(), before - 900 * kMiB);  // a real driver adds the victim's context
  }
  victim.Kill(SIGKILL);
  EXPECT_EQ(victim.Wait(), 128 + SIGKILL);
  EXPECT_FREE(before, 2 * kMiB);
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 900 * kMiB));
  CHECK_CU(cuMemFree(p));
}

TEST_F(MultiProcessTest, KilledProcessNeverBlocksTheDevice) {
  // The victim runs a long kernel (holding the device) when it dies.
  Child victim({Worker(), "hold", "0", std::to_string(4 * kMiB), "5"});
  ASSERT_EQ(victim.ReadUntil("ready"), "ready " + std::to_string(victim.pid()));
  victim.WriteLine("busy 5000000");
  ASSERT_EQ(victim.ReadUntil("launched"), "launched CUDA_SUCCESS");
  usleep(50000);
  victim.Kill(SIGKILL);
  victim.Wait();
  CHECK_CU(LaunchBusy(busy_, 1000, nullptr));
  CHECK_CU(cuCtxSynchronize());  // returns: the dead holder lost the device
}

TEST_F(MultiProcessTest, ForkedChildIsAProcessOfItsOwn) {
  const size_t before = FreeMemory();
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    // The child starts with no driver and initialises its own.
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    char status = 'x';
    if (cuDeviceGet(&dev, 0) == CUDA_ERROR_NOT_INITIALIZED && cuInit(0) == CUDA_SUCCESS &&
        cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
        cuMemAlloc(&p, 64 * kMiB) == CUDA_SUCCESS) {
      status = 'k';
    }
    if (write(to_parent[1], &status, 1) != 1) _exit(3);
    char go;
    if (read(to_child[0], &go, 1) != 1) _exit(4);
    _exit(status == 'k' ? 0 : 2);
  }
  char status = 0;
  ASSERT_EQ(read(to_parent[0], &status, 1), 1);
  EXPECT_EQ(status, 'k');
  EXPECT_EQ(FreeMemory(), before - 64 * kMiB);
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  EXPECT_EQ(FreeMemory(), before);  // reaped
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
  CHECK_CU(cuCtxSynchronize());  // the parent's driver is untouched
}

TEST_F(MultiProcessTest, DeviceTimeIsSlicedFairlyBetweenProcesses) {
  const uint64_t kernel_us = 2000, duration_ms = 3000;
  Child a({Worker(), "busy", std::to_string(kernel_us), std::to_string(duration_ms)});
  Child b({Worker(), "busy", std::to_string(kernel_us), std::to_string(duration_ms)});
  ASSERT_EQ(a.ReadUntil("ready"), "ready");
  ASSERT_EQ(b.ReadUntil("ready"), "ready");
  a.WriteLine("go");
  b.WriteLine("go");
  std::string da = a.ReadUntil("done", 30000), db = b.ReadUntil("done", 30000);
  ASSERT_FALSE(da.empty());
  ASSERT_FALSE(db.empty());
  const double ka = std::strtod(da.c_str() + 13, nullptr), kb = std::strtod(db.c_str() + 13, nullptr);
  const double share_a = ka / (ka + kb);
  // Each got about half of the device ...
  EXPECT_GT(share_a, 0.3) << da << " / " << db;
  EXPECT_LT(share_a, 0.7) << da << " / " << db;
  // ... and never both at once: their kernel time adds up to at most the window.
  const double kernel_ms = (ka + kb) * static_cast<double>(kernel_us) / 1000.0;
  EXPECT_LT(kernel_ms, static_cast<double>(duration_ms) * 1.1) << da << " / " << db;
  EXPECT_EQ(a.Wait(), 0);
  EXPECT_EQ(b.Wait(), 0);
}

}  // namespace
}  // namespace gslice::test
