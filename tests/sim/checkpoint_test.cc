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
  EXPECT_EQ(FreeMemory(), before - 300 * kMiB);

  // A locked process's CUDA calls block until it is unlocked.
  child.WriteLine("info");
  std::string line;
  EXPECT_FALSE(child.ReadLine(&line, 300)) << line;

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
  EXPECT_EQ(FreeMemory(), before - 300 * kMiB);
  CHECK_CU(cuCheckpointProcessUnlock(pid, nullptr));
  EXPECT_EQ(StateOf(pid), CU_PROCESS_STATE_RUNNING);

  // The blocked call completes, and the data survived.
  EXPECT_EQ(child.ReadUntil("info").rfind("info CUDA_SUCCESS", 0), 0u);
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
  EXPECT_CU(CUDA_ERROR_TIMEOUT, cuCheckpointProcessLock(pid, &lock));
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
  // A pid that is not a CUDA process of this node.
  Child sleeper({"/bin/sleep", "30"});
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuCheckpointProcessGetState(sleeper.pid(), &s));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuCheckpointProcessLock(sleeper.pid(), nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuCheckpointProcessLock(-1, nullptr));
  CUcheckpointLockArgs lock{};
  lock.reserved0 = 1;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuCheckpointProcessLock(getpid(), &lock));
  CUcheckpointRestoreArgs restore{};
  restore.gpuPairsCount = 1;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuCheckpointProcessRestore(getpid(), &restore));
  // This process itself is a CUDA process of the node.
  EXPECT_EQ(StateOf(getpid()), CU_PROCESS_STATE_RUNNING);
}

}  // namespace
}  // namespace gslice::test
