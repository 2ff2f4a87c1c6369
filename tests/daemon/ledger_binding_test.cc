// gsliced's view of the node ledger (ledger_binding.cc) when processes run in containers:
// a process in another pid namespace is reported under the pid gsliced sees, its memory
// counts, and its compute entry is matched to it by (namespace, pid), not by its
// container-local pid (which names another process here).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "gslice/clock.h"
#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "ledger_binding.h"
#include "pid_namespace_fixture.h"

namespace gslice {
namespace {

const uint8_t kUuid[16] = {0xa0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
constexpr const char* kUuidText = "GPU-a0010203-0405-0607-0809-0a0b0c0d0e0f";

// The container: pid 1 of a new pid namespace with its own /proc, attached to slice "pod"
// with `bytes` charged and a compute entry with virtual time on the GPU.
pid_t SpawnContainerProcess(Report* r, const std::string& ledger, int64_t bytes) {
  return SpawnInNewPidNamespace(r, [&]() -> int {
    Ledger l;
    if (l.Open(ledger.c_str()) != LedgerError::kOk) return 2;
    const uint32_t me = static_cast<uint32_t>(getpid());
    SliceHandle h;
    if (l.AttachByName("pod", SliceClass::kGuaranteed, 0, me, ProcessStartTime(me), &h) != LedgerError::kOk) return 3;
    int g = -1;
    if (l.FindOrAddGpu(h.slice, kUuid, -1, &g) != LedgerError::kOk) return 4;
    l.ForceCharge(h, g, bytes);
    const int entry = h.slice * kLedgerSliceComputeEntries;  // the slice's first compute entry
    LedgerComputeEntry& e = *l.ComputeEntry(entry);
    uint64_t expected = 0;
    if (!e.state.compare_exchange_strong(expected, PackState(EntryState::kClaiming, me)) || !l.AcquireComputeEntry(entry)) return 5;
    std::memcpy(e.uuid, kUuid, 16);
    e.share_permille.store(1000);
    e.vtime_ns.store(5'000'000);
    e.active_until_ns.store(MonotonicNs() + 3'600'000'000'000);
    e.state.store(PackState(EntryState::kAlive, me));
    r->ready.store(1);
    pause();
    return 0;
  });
}

TEST(LedgerBinding, ReportsContainerProcessesUnderTheirHostPid) {
  const std::string path = "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-binding-ns";
  std::filesystem::remove_all(path);
  {
    Ledger creator;
    ASSERT_EQ(creator.Open(path.c_str()), LedgerError::kOk);
  }
  Report* r = NewReport();
  ASSERT_NE(r, nullptr);
  pid_t mid = SpawnContainerProcess(r, path, int64_t{3} << 20);
  ASSERT_GT(mid, 0);
  WAIT_READY_OR_SKIP(r);
  const int host_pid = r->host_pid.load();
  ASSERT_GT(host_pid, 1);  // never kill(0) or kill(1)

  // Our namespace's pid 1 in another slice: the container process's twin by bare pid. The
  // container's compute entry must not be credited to it.
  Ledger here;
  ASSERT_EQ(here.Open(path.c_str()), LedgerError::kOk);
  SliceHandle twin;
  ASSERT_EQ(here.AttachByName("twin", SliceClass::kGuaranteed, 0, 1, ProcessStartTime(1), &twin), LedgerError::kOk);
  int twin_gpu = -1;
  ASSERT_EQ(here.FindOrAddGpu(twin.slice, kUuid, -1, &twin_gpu), LedgerError::kOk);
  here.ForceCharge(twin, twin_gpu, 1 << 20);
  {
    auto opened = OpenNodeLedger(path);
    ASSERT_TRUE(opened.ok());
    NodeLedger& ledger = **opened;
    auto procs = ledger.Processes();
    ASSERT_TRUE(procs.ok());
    ASSERT_EQ(procs->size(), 2u);
    const ProcessUsage& p = (*procs)[0].slice == "pod" ? (*procs)[0] : (*procs)[1];
    const ProcessUsage& t = (*procs)[0].slice == "pod" ? (*procs)[1] : (*procs)[0];
    EXPECT_EQ(t.slice, "twin");
    EXPECT_EQ(t.pid, 1);
    EXPECT_EQ(t.memory_used, uint64_t{1} << 20);
    EXPECT_EQ(t.busy_ns, 0u);
    EXPECT_FALSE(t.active);
    EXPECT_EQ(p.pid, host_pid);  // not 1, the pid it knows itself by
    EXPECT_EQ(p.slice, "pod");
    EXPECT_EQ(p.gpu_uuid, kUuidText);
    EXPECT_EQ(p.memory_used, uint64_t{3} << 20);
    EXPECT_EQ(p.busy_ns, 5'000'000u);  // its compute entry, matched by (namespace, pid)
    EXPECT_TRUE(p.active);

    kill(host_pid, SIGKILL);
    ASSERT_TRUE(WaitFor([&] {
      auto now = ledger.Processes();
      return now.ok() && now->size() == 1 && (*now)[0].slice == "twin";
    })) << "the killed container process is still reported";
  }
  here.Detach(twin);
  int status = 0;
  waitpid(mid, &status, 0);
  munmap(r, 4096);
  std::filesystem::remove_all(path);
}

// gsliced restarting re-reads the ledger and publishes its slices again: limits and owner are
// rewritten in place, the usage of running processes is never touched (same usage file), and
// the usage file belongs to the slice's user, who alone (with root) may charge into it.
TEST(LedgerBinding, RepublishingAfterARestartKeepsUsage) {
  const std::string path = "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-binding-restart";
  std::filesystem::remove_all(path);
  Slice slice;
  slice.name = "team-a";
  slice.user = "nobody";
  slice.gpus.push_back(SliceGpu{kUuidText, uint64_t{4} << 30, 0});
  {
    auto opened = OpenNodeLedger(path);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    ASSERT_TRUE((*opened)->Publish(slice).ok());
  }
  Ledger proc;  // a process of the slice (root may write any usage file)
  ASSERT_EQ(proc.Open(path.c_str()), LedgerError::kOk);
  const uint32_t me = static_cast<uint32_t>(getpid());
  SliceHandle h;
  ASSERT_EQ(proc.AttachByName("team-a", SliceClass::kGuaranteed, 0, me, ProcessStartTime(me), &h), LedgerError::kOk);
  const int gpu = proc.FindGpu(h.slice, kUuid);
  ASSERT_GE(gpu, 0);
  ASSERT_EQ(proc.Charge(h, gpu, 3 << 20), ChargeResult::kOk);
  const std::string usage = path + "/slice-" + std::to_string(h.slice);
  struct stat before;
  ASSERT_EQ(stat(usage.c_str(), &before), 0);
  EXPECT_EQ(before.st_uid, 65534u);  // nobody's
  {
    auto opened = OpenNodeLedger(path);  // the restarted daemon
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    auto slices = (*opened)->Slices();
    ASSERT_TRUE(slices.ok());
    ASSERT_EQ(slices->size(), 1u);
    EXPECT_EQ((*slices)[0].name, "team-a");
    slice.gpus[0].memory_limit = uint64_t{6} << 30;
    ASSERT_TRUE((*opened)->Publish(slice).ok());
  }
  struct stat after;
  ASSERT_EQ(stat(usage.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // the same file: nothing recreated
  EXPECT_EQ(after.st_uid, 65534u);
  EXPECT_EQ(proc.SliceUsage(h.slice, gpu), 3 << 20);
  EXPECT_EQ(proc.Limit(h.slice, gpu), int64_t{6} << 30);
  proc.Detach(h);
  std::filesystem::remove_all(path);
}

}  // namespace
}  // namespace gslice
