// The suspend service and processes in containers: the board and the ledger know such a
// process by (pid namespace, its container-local pid); the service names it by the pid it
// sees (a made-up /proc here maps namespace 200's pid 7 to 4242), checkpoints that pid, and
// closes and opens the gate of the right board entry even when another container has a pid 7.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <algorithm>
#include <cstdio>
#include <string>

#include "fake_driver.h"
#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "gslice/suspend/service.h"
#include "gslice/suspend_board.h"
#include "pid_namespace_fixture.h"
#include "scoped_path.h"

namespace gslice::suspend {
namespace {

using testing::FakeDriver;

const uint8_t kGpu[16] = {0x5e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

std::string ShmPath(const char* name) {
  return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-" + name;
}

// A board entry that looks claimed by pid `pid` of namespace `ns`: the test's own claim
// (so the test holds its lock byte, as the container's process would), rewritten.
SuspendShimEntry* FakeContainerEntry(SuspendShimBoard& board, uint64_t ns, uint32_t pid, uint64_t start) {
  const uint32_t me = static_cast<uint32_t>(getpid());
  SuspendShimEntry* e = board.Claim(me, ProcessStartTime(me));
  if (e == nullptr) return nullptr;
  e->pid_ns.store(ns);
  e->start_time.store(start);
  e->owner.store(BoardOwnerWord(pid, 77));
  return e;
}

// The made-up process maps the partition file writable, as its shim would.
void MapsPartition(const FakeProc& proc, uint32_t host_pid, const std::string& partition) {
  struct stat st;
  ASSERT_EQ(stat(partition.c_str(), &st), 0) << partition;
  FILE* f = fopen((proc.root() + "/" + std::to_string(host_pid) + "/maps").c_str(), "w");
  ASSERT_NE(f, nullptr);
  fprintf(f, "7f0000000000-7f0000081000 rw-s 00000000 %02x:%02x %llu %s\n", major(st.st_dev), minor(st.st_dev),
          static_cast<unsigned long long>(st.st_ino), partition.c_str());
  fclose(f);
}

TEST(SuspendServiceNamespaces, FindsAContainerProcessByTheHostPid) {
  const std::string ledger_path = ShmPath("svc-ns-ledger");
  test::ScopedPath board_dir("svc-ns-board");
  const std::string board_path = board_dir.path();
  std::filesystem::remove_all(ledger_path);
  std::string board_error;
  ASSERT_TRUE(CreateSuspendBoard(board_path.c_str(), &board_error)) << board_error;
  FakeProc proc;
  proc.Self(100);
  proc.Process(4242, 200, "4242\t7", 555);  // pid 7 of container namespace 200
  proc.Process(4243, 300, "4243\t7", 556);  // pid 7 of another container

  // Container 200's process is in slice team-c (opportunistic) with 1 MiB on the GPU.
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_path.c_str()), LedgerError::kOk);
  int slice = -1, gpu = -1;
  ASSERT_EQ(ledger.FindOrCreateSlice("team-c", SliceClass::kOpportunistic, 0, &slice), LedgerError::kOk);
  ASSERT_EQ(ledger.FindOrAddGpu(slice, kGpu, -1, &gpu), LedgerError::kOk);
  SliceHandle h;
  const uint32_t me = static_cast<uint32_t>(getpid());
  ASSERT_EQ(ledger.Attach(slice, me, ProcessStartTime(me), &h), LedgerError::kOk);
  ledger.ForceCharge(h, gpu, 1 << 20);
  LedgerProcess& slot = ledger.usage(slice)->slots[h.slot];
  slot.pid_ns.store(200);
  slot.start_time.store(555);
  slot.state.store(PackState(EntryState::kAlive, 7, 9));

  SuspendShimBoard board;
  ASSERT_TRUE(board.Open(board_path.c_str(), nullptr, &board_error)) << board_error;
  SuspendShimEntry* e200 = FakeContainerEntry(board, 200, 7, 555);
  SuspendShimEntry* e300 = FakeContainerEntry(board, 300, 7, 556);
  ASSERT_NE(e200, nullptr);
  ASSERT_NE(e300, nullptr);
  ASSERT_NE(e200, e300);
  const std::string partition = board_path + "/shim/" + board.partition_name();
  MapsPartition(proc, 4242, partition);
  MapsPartition(proc, 4243, partition);

  auto driver = std::make_unique<FakeDriver>();
  FakeDriver* d = driver.get();
  d->states[4242] = CU_PROCESS_STATE_RUNNING;
  d->states[4243] = CU_PROCESS_STATE_RUNNING;
  ServiceOptions o;
  o.ledger_path = ledger_path;
  o.board_path = board_path;
  o.proc_root = proc.root();
  o.host.reserve_bytes = 0;
  o.free_bytes = [](const std::string&) { return uint64_t{1} << 30; };
  std::string error;
  auto service = SuspendService::CreateWithDriver(o, std::move(driver), &error);
  ASSERT_NE(service, nullptr) << error;

  service->Tick();
  ASSERT_TRUE(board.Attach());  // the service made the partition's gates
  auto gate = [&](const SuspendShimEntry* e) { return board.GateOf(*e)->gate.load(); };
  auto snap = service->Snapshot();
  auto find = [&](int pid) {
    return std::find_if(snap.begin(), snap.end(), [pid](const ProcessStatus& s) { return s.info.pid == pid; });
  };
  ASSERT_NE(find(4242), snap.end());
  ASSERT_NE(find(4243), snap.end());
  EXPECT_EQ(find(7), snap.end());  // never by the container-local pid
  EXPECT_EQ(find(4242)->info.slice, "team-c");
  EXPECT_TRUE(find(4242)->info.opportunistic);
  EXPECT_EQ(find(4242)->info.device_bytes, 1u << 20);
  EXPECT_EQ(find(4243)->info.slice, "");  // the other pid 7 has no ledger slot

  // Suspending the host pid checkpoints that pid and closes that process's gate only.
  Outcome s = service->Suspend(4242);
  EXPECT_TRUE(s.ok) << s.reason;
  EXPECT_EQ(d->states[4242], CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(d->states[4243], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(gate(e200), kGateClosed);
  EXPECT_EQ(gate(e300), kGateOpen);
  Outcome r = service->Resume(4242);
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(d->states[4242], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(gate(e200), kGateOpen);

  // A host pid the service has not sampled yet is found through /proc (NSpid, ns/pid).
  proc.Process(4244, 200, "4244\t8", 557);
  d->states[4244] = CU_PROCESS_STATE_RUNNING;
  SuspendShimEntry* e8 = FakeContainerEntry(board, 200, 8, 557);
  ASSERT_NE(e8, nullptr);
  MapsPartition(proc, 4244, partition);
  Outcome s8 = service->Suspend(4244);
  EXPECT_TRUE(s8.ok) << s8.reason;
  EXPECT_EQ(gate(e8), kGateClosed);
  EXPECT_EQ(gate(e200), kGateOpen);
  service->Resume(4244);

  service.reset();
  std::filesystem::remove_all(ledger_path);
}

}  // namespace
}  // namespace gslice::suspend
