// The process checkpoint API driven from this process against a child that holds memory.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "nvml_sim.h"
#include "sim_test.h"

namespace gslice::test {
namespace {

using CheckpointTest = SimTest;

CUprocessState StateOf(pid_t pid) {
  CUprocessState s = CU_PROCESS_STATE_FAILED;
  EXPECT_EQ(cuCheckpointProcessGetState(pid, &s), CUDA_SUCCESS);
  return s;
}

CUuuid DeviceUuid(int ordinal) {
  CUuuid u{};
  EXPECT_EQ(cuDeviceGetUuid(&u, ordinal), CUDA_SUCCESS);
  return u;
}

// The child's 300 MiB are charged: exactly on the sim; a real driver adds the child's context.
void ExpectHeld(size_t before) {
  const size_t free_now = SimTest::FreeMemory();
  if (SimTest::OnSim()) {
    EXPECT_EQ(free_now, before - 300 * kMiB);
  } else {
    EXPECT_LE(free_now, before - 300 * kMiB);
  }
}

TEST_F(CheckpointTest, FullCycleMovesMemoryOutAndBack) {
  const size_t before = FreeMemory();
  Child child({Worker(), "hold", "0", std::to_string(300 * kMiB), "0xc0ffee"});
  ASSERT_EQ(child.ReadUntil("ready"), "ready " + std::to_string(child.pid()));
  const pid_t pid = child.pid();
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_RUNNING);
  int tid = 0;
  CHECK_CU(cuCheckpointProcessGetRestoreThreadId(pid, &tid));
  EXPECT_GT(tid, 0);

  // Wrong states are refused and change nothing.
  EXPECT_CU(CUDA_ERROR_ILLEGAL_STATE, cuCheckpointProcessCheckpoint(pid, nullptr));
  EXPECT_CU(CUDA_ERROR_ILLEGAL_STATE, cuCheckpointProcessRestore(pid, nullptr));
  EXPECT_CU(CUDA_ERROR_ILLEGAL_STATE, cuCheckpointProcessUnlock(pid, nullptr));
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_RUNNING);

  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 5000;
  CHECK_CU(cuCheckpointProcessLock(pid, &lock));
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_LOCKED);
  EXPECT_CU(CUDA_ERROR_ILLEGAL_STATE, cuCheckpointProcessLock(pid, &lock));
  ExpectHeld(before);

  // A locked process's CUDA calls block until it is unlocked (on the sim every call; the
  // driver lets a query such as cuMemGetInfo through).
  child.WriteLine("info");
  std::string line;
  const bool answered = child.ReadLine(&line, 300);
  if (OnSim()) {
    EXPECT_FALSE(answered) << line;
  }

  CHECK_CU(cuCheckpointProcessCheckpoint(pid, nullptr));
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(FreeMemory(), before);  // the device memory is released
  {
    Nvml nvml;
    ASSERT_EQ(nvml.nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t dev;
    ASSERT_EQ(nvml.nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    unsigned count = 8;
    nvmlProcessInfo_t infos[8];
    ASSERT_EQ(nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos), NVML_SUCCESS);
    for (unsigned i = 0; i < count; ++i) EXPECT_NE(infos[i].pid, static_cast<unsigned>(pid));
    nvml.nvmlShutdown();
  }

  CHECK_CU(cuCheckpointProcessRestore(pid, nullptr));
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_LOCKED);
  ExpectHeld(before);
  CHECK_CU(cuCheckpointProcessUnlock(pid, nullptr));
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_RUNNING);

  // The blocked call completes, and the data survived.
  if (!answered) line = child.ReadUntil("info");
  EXPECT_EQ(line.rfind("info CUDA_SUCCESS", 0), 0u) << line;
  child.WriteLine("verify");
  EXPECT_EQ(child.ReadUntil("verified"), "verified ok");
  child.WriteLine("exit");
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(CheckpointTest, RestoreFailsCleanlyWithoutRoom) {
  Child child({Worker(), "hold", "0", std::to_string(600 * kMiB), "0x77"});
  ASSERT_EQ(child.ReadUntil("ready"), "ready " + std::to_string(child.pid()));
  const pid_t pid = child.pid();
  CHECK_CU(cuCheckpointProcessLock(pid, nullptr));
  CHECK_CU(cuCheckpointProcessCheckpoint(pid, nullptr));
  // Someone else takes the room while the child is out.
  CUdeviceptr squatter;
  CHECK_CU(cuMemAlloc(&squatter, 700 * kMiB));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuCheckpointProcessRestore(pid, nullptr));
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_CHECKPOINTED);
  CHECK_CU(cuMemFree(squatter));
  CHECK_CU(cuCheckpointProcessRestore(pid, nullptr));
  CHECK_CU(cuCheckpointProcessUnlock(pid, nullptr));
  child.WriteLine("verify");
  EXPECT_EQ(child.ReadUntil("verified"), "verified ok");
}

TEST_F(CheckpointTest, RestoreWithGpuPairsMovesTheProcess) {
  Child child({Worker(), "hold", "0", std::to_string(200 * kMiB), "0x4242"});
  ASSERT_EQ(child.ReadUntil("ready"), "ready " + std::to_string(child.pid()));
  const pid_t pid = child.pid();
  CHECK_CU(cuCtxSetCurrent(ctx_));
  CUcontext ctx1;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx1, 1));
  CHECK_CU(cuCtxSetCurrent(ctx1));
  const size_t free1 = FreeMemory();
  CHECK_CU(cuCtxSetCurrent(ctx_));
  const size_t free0 = FreeMemory();

  CHECK_CU(cuCheckpointProcessLock(pid, nullptr));
  CHECK_CU(cuCheckpointProcessCheckpoint(pid, nullptr));
  CUcheckpointGpuPair pair{DeviceUuid(0), DeviceUuid(1)};
  CUcheckpointRestoreArgs args{};
  args.gpuPairs = &pair;
  args.gpuPairsCount = 1;
  CHECK_CU(cuCheckpointProcessRestore(pid, &args));
  CHECK_CU(cuCheckpointProcessUnlock(pid, nullptr));

  EXPECT_EQ(FreeMemory(), free0 + 200 * kMiB);
  CHECK_CU(cuCtxSetCurrent(ctx1));
  EXPECT_EQ(FreeMemory(), free1 - 200 * kMiB);
  CHECK_CU(cuCtxSetCurrent(ctx_));
  CHECK_CU(cuDevicePrimaryCtxRelease(1));
  child.WriteLine("verify");
  EXPECT_EQ(child.ReadUntil("verified"), "verified ok");
  child.WriteLine("uuid");
  const std::string uuid_line = child.ReadUntil("uuid");
  const CUuuid u1 = DeviceUuid(1);
  char head[16];
  std::snprintf(head, sizeof head, "uuid GPU-%02x%02x", static_cast<unsigned char>(u1.bytes[0]),
                static_cast<unsigned char>(u1.bytes[1]));
  EXPECT_EQ(uuid_line.rfind(head, 0), 0u) << uuid_line;
}

TEST_F(CheckpointTest, InjectedCheckpointFailureLeavesTheProcessLocked) {
  Child child({Worker(), "hold", "0", std::to_string(64 * kMiB), "0x99"});
  ASSERT_EQ(child.ReadUntil("ready"), "ready " + std::to_string(child.pid()));
  const pid_t pid = child.pid();
  const size_t before = FreeMemory();
  CHECK_CU(cuCheckpointProcessLock(pid, nullptr));
  setenv("GSLICE_SIM_FAIL_CHECKPOINT", "1", 1);
  CUresult r = cuCheckpointProcessCheckpoint(pid, nullptr);
  unsetenv("GSLICE_SIM_FAIL_CHECKPOINT");
  EXPECT_CU(CUDA_ERROR_UNKNOWN, r);
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_LOCKED);
  EXPECT_EQ(FreeMemory(), before);  // nothing moved
  CHECK_CU(cuCheckpointProcessCheckpoint(pid, nullptr));
  setenv("GSLICE_SIM_FAIL_RESTORE", "1", 1);
  r = cuCheckpointProcessRestore(pid, nullptr);
  unsetenv("GSLICE_SIM_FAIL_RESTORE");
  EXPECT_CU(CUDA_ERROR_UNKNOWN, r);
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_CHECKPOINTED);
  CHECK_CU(cuCheckpointProcessRestore(pid, nullptr));
  CHECK_CU(cuCheckpointProcessUnlock(pid, nullptr));
  child.WriteLine("verify");
  EXPECT_EQ(child.ReadUntil("verified"), "verified ok");
}

TEST_F(CheckpointTest, LockTimesOutWhileWorkIsInFlight) {
  Child child({Worker(), "hold", "0", std::to_string(4 * kMiB), "0x1"});
  ASSERT_EQ(child.ReadUntil("ready"), "ready " + std::to_string(child.pid()));
  const pid_t pid = child.pid();
  child.WriteLine("busy 2000000");
  ASSERT_EQ(child.ReadUntil("launched"), "launched CUDA_SUCCESS");
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 100;
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuCheckpointProcessLock(pid, &lock));  // as the driver
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_RUNNING);
  child.WriteLine("sync");
  EXPECT_EQ(child.ReadUntil("synced"), "synced CUDA_SUCCESS");  // not left blocked
  lock.timeoutMs = 0;
  CHECK_CU(cuCheckpointProcessLock(pid, &lock));
  CHECK_CU(cuCheckpointProcessUnlock(pid, nullptr));
}

TEST_F(CheckpointTest, BadArgumentsAndUnknownProcesses) {
  CUprocessState s;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuCheckpointProcessGetState(getpid(), nullptr));
  // A pid that never initialised CUDA, and one that is no process at all (the driver's answers).
  Child sleeper({"/bin/sleep", "30"});
  EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuCheckpointProcessGetState(sleeper.pid(), &s));
  EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuCheckpointProcessLock(sleeper.pid(), nullptr));
  EXPECT_CU(CUDA_ERROR_OPERATING_SYSTEM, cuCheckpointProcessLock(-1, nullptr));
  // Locking or restoring the calling process itself is not defined by the driver (it crashes),
  // so malformed arguments are not tried against this process here.
  // This process itself is a CUDA process of the node.
  EXPECT_EQ(StateOf(getpid()), CU_PROCESS_STATE_RUNNING);
}

}  // namespace
}  // namespace gslice::test
