// The node ledger across pid namespaces (containers): liveness by the owners' lock bytes,
// forked children that keep the ledger's file open, compute entries, and mapping a
// container-local pid to the pid another namespace sees (PidResolver).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "pid_namespace_fixture.h"

namespace gslice {
namespace {

const uint8_t kUuid[16] = {9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

// A ledger directory of the test's own, removed with everything in it (also on failure).
struct LedgerFile {
  explicit LedgerFile(const char* name)
      : path("/dev/shm/gslice-test-" + std::to_string(getpid()) + "-" + name) {
    std::filesystem::remove_all(path);
  }
  ~LedgerFile() { std::filesystem::remove_all(path); }
  std::string usage(int slice) const { return path + "/slice-" + std::to_string(slice); }
  std::string path;
};

// A process in a container attaches and charges; a process outside (the test, as gsliced
// or a peer in another pod would be) must not reap it while it lives, must see its usage
// and its pid, and must reap it once it is killed.
TEST(LedgerNamespaces, OwnerInAnotherNamespaceIsAliveUntilKilled) {
  LedgerFile f("ns-owner");
  {
    Ledger creator;
    ASSERT_EQ(creator.Open(f.path.c_str()), LedgerError::kOk);  // created here: the inode both map
  }
  Report* r = NewReport();
  ASSERT_NE(r, nullptr);
  const std::string path = f.path;
  pid_t mid = SpawnInNewPidNamespace(r, [r, path] {
    Ledger l;
    if (l.Open(path.c_str()) != LedgerError::kOk) return 2;
    const uint32_t me = static_cast<uint32_t>(getpid());
    SliceHandle h;
    if (l.AttachByName("pod", SliceClass::kGuaranteed, 0, me, ProcessStartTime(me), &h) != LedgerError::kOk) return 3;
    int g = -1;
    if (l.FindOrAddGpu(h.slice, kUuid, 1000, &g) != LedgerError::kOk) return 4;
    if (l.Charge(h, g, 600) != ChargeResult::kOk) return 5;
    r->slot.store(h.slot);
    r->ready.store(1);
    pause();  // until killed
    return 0;
  });
  ASSERT_GT(mid, 0);
  WAIT_READY_OR_SKIP(r);
  const pid_t host_pid = r->host_pid.load();
  EXPECT_EQ(r->inner_pid.load(), 1);  // the container's view
  ASSERT_GT(host_pid, 1);

  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  const int slice = l.FindSlice("pod");
  ASSERT_GE(slice, 0);
  ASSERT_EQ(l.MapUsage(slice), LedgerError::kOk);
  const int g = l.FindGpu(slice, kUuid);
  ASSERT_GE(g, 0);
  const int slot = r->slot.load();
  LedgerProcess& p = l.usage(slice)->slots[slot];
  const uint64_t word = p.state.load();
  ASSERT_EQ(StateOf(word), EntryState::kAlive);
  EXPECT_EQ(PidOf(word), 1u);
  EXPECT_NE(p.pid_ns.load(), 0u);
  EXPECT_NE(p.pid_ns.load(), SelfPidNamespace());
  // Judged by pid here, pid 1 is somebody else (or nobody): a pid rule would reap it.
  EXPECT_FALSE(ProcessAlive(PidOf(word), p.start_time.load()));

  EXPECT_TRUE(l.SlotOwnerAlive(slice, slot));
  EXPECT_EQ(l.Reap(slice), 0);
  EXPECT_EQ(l.AliveCount(slice), 1);
  EXPECT_EQ(l.SliceUsage(slice, g), 600);
  // A charge that does not fit reaps before it refuses: the live container's memory stays.
  SliceHandle mine;
  const uint32_t me = static_cast<uint32_t>(getpid());
  ASSERT_EQ(l.Attach(slice, me, ProcessStartTime(me), &mine), LedgerError::kOk);
  EXPECT_EQ(l.Charge(mine, g, 500), ChargeResult::kOverLimit);
  EXPECT_EQ(l.SliceUsage(slice, g), 600);
  // The pid gsliced would report.
  const uint64_t container_ns = p.pid_ns.load();
  PidResolver resolver("/proc", 0);
  EXPECT_EQ(resolver.Resolve(p.pid_ns.load(), PidOf(word), p.start_time.load()), static_cast<uint32_t>(host_pid));
  EXPECT_EQ(resolver.Resolve(p.pid_ns.load(), PidOf(word), p.start_time.load() + 1), 0u);  // another process

  kill(host_pid, SIGKILL);
  int reaped = 0;
  EXPECT_TRUE(WaitFor([&] {
    reaped += l.Reap(slice);
    return reaped > 0;
  })) << "the killed process's slot was never reaped";
  EXPECT_EQ(reaped, 1);
  EXPECT_EQ(l.SliceUsage(slice, g), 0);
  EXPECT_EQ(l.Charge(mine, g, 500), ChargeResult::kOk);
  // Gone (its lock is dropped early in exit; the process itself disappears a moment later).
  EXPECT_TRUE(WaitFor([&] { return resolver.Resolve(container_ns, 1, 0) == 0; }));
  l.Detach(mine);
  int status = 0;
  ASSERT_EQ(waitpid(mid, &status, 0), mid);
  munmap(r, 4096);
}

// A forked child (no exec) shares the parent's open file and so its lock bytes. When the
// parent dies the child keeps the bytes locked, yet a process of the same namespace reaps
// the parent's slot (its pid is dead) and its compute entry is judged dead too.
TEST(LedgerNamespaces, ForkedChildDoesNotKeepADeadParentAlive) {
  LedgerFile f("fork-pin");
  Report* r = NewReport();
  ASSERT_NE(r, nullptr);
  pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    Ledger l;
    if (l.Open(f.path.c_str()) != LedgerError::kOk) _exit(2);
    const uint32_t me = static_cast<uint32_t>(getpid());
    SliceHandle h;
    if (l.AttachByName("forky", SliceClass::kGuaranteed, 0, me, ProcessStartTime(me), &h) != LedgerError::kOk) _exit(3);
    int g = -1;
    if (l.FindOrAddGpu(h.slice, kUuid, -1, &g) != LedgerError::kOk) _exit(4);
    l.ForceCharge(h, g, 300);
    // A compute entry, claimed the way the launch gate claims one.
    const int entry = h.slice * kLedgerSliceComputeEntries + 5;
    LedgerComputeEntry& e = *l.ComputeEntry(entry);
    uint64_t expected = 0;
    if (!e.state.compare_exchange_strong(expected, PackState(EntryState::kClaiming, me))) _exit(5);
    if (!l.AcquireComputeEntry(entry)) _exit(6);
    e.state.store(PackState(EntryState::kAlive, me));
    pid_t kid = fork();
    if (kid == 0) {
      pause();  // holds the inherited descriptor
      _exit(0);
    }
    r->child_pid.store(static_cast<int>(kid));
    r->slot.store(h.slot);
    r->ready.store(1);
    pause();
    _exit(0);
  }
  ASSERT_TRUE(WaitFor([&] { return r->ready.load() == 1; }));
  const pid_t kid = r->child_pid.load();
  ASSERT_GT(kid, 1);
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  const int slice = l.FindSlice("forky");
  ASSERT_GE(slice, 0);
  ASSERT_EQ(l.MapUsage(slice), LedgerError::kOk);
  const int entry = slice * kLedgerSliceComputeEntries + 5;
  const int g = l.FindGpu(slice, kUuid);
  const int slot = r->slot.load();
  EXPECT_TRUE(l.SlotOwnerAlive(slice, slot));
  EXPECT_TRUE(l.ComputeOwnerAlive(entry));
  EXPECT_EQ(l.Reap(slice), 0);

  kill(parent, SIGKILL);
  ASSERT_EQ(waitpid(parent, nullptr, 0), parent);
  // The child still holds the parent's bytes: the lock alone would call the parent alive.
  EXPECT_TRUE(ByteLockedInFile(f.usage(slice), LedgerSlotLockByte(slot)));
  EXPECT_TRUE(ByteLockedInFile(f.usage(slice), LedgerComputeLockByte(5)));
  EXPECT_FALSE(l.ComputeOwnerAlive(entry));
  EXPECT_FALSE(l.SlotOwnerAlive(slice, slot));
  EXPECT_EQ(l.Reap(slice), 1);
  EXPECT_EQ(l.SliceUsage(slice, g), 0);
  // While the child lives, its lock keeps new claimers off that slot (they take others).
  std::vector<SliceHandle> hs(kLedgerMaxSlots - 1);
  const uint32_t me = static_cast<uint32_t>(getpid());
  for (auto& h : hs) {
    ASSERT_EQ(l.Attach(slice, me, ProcessStartTime(me), &h), LedgerError::kOk);
    EXPECT_NE(h.slot, slot);
  }
  SliceHandle one_more;
  EXPECT_EQ(l.Attach(slice, me, ProcessStartTime(me), &one_more), LedgerError::kNoProcessSlot);
  kill(kid, SIGKILL);
  // Orphaned: its new parent waits for it. Once it is gone, the slot is usable again.
  ASSERT_TRUE(WaitFor([&] { return !ByteLockedInFile(f.usage(slice), LedgerSlotLockByte(slot)); }));
  ASSERT_EQ(l.Attach(slice, me, ProcessStartTime(me), &one_more), LedgerError::kOk);
  EXPECT_EQ(one_more.slot, slot);
  for (auto& h : hs) l.Detach(h);
  l.Detach(one_more);
  EXPECT_EQ(l.AliveCount(slice), 0);
  munmap(r, 4096);
}

// Compute entries of a process in another namespace: alive while it lives, whatever its
// container-local pid means here; dead once it is killed.
TEST(LedgerNamespaces, ComputeEntryOfAnotherNamespace) {
  LedgerFile f("ns-compute");
  {
    Ledger creator;
    ASSERT_EQ(creator.Open(f.path.c_str()), LedgerError::kOk);
  }
  Report* r = NewReport();
  ASSERT_NE(r, nullptr);
  const std::string path = f.path;
  pid_t mid = SpawnInNewPidNamespace(r, [r, path] {
    Ledger l;
    if (l.Open(path.c_str()) != LedgerError::kOk) return 2;
    const uint32_t me = static_cast<uint32_t>(getpid());
    int slice = -1;
    if (l.FindOrCreateSlice("computes", SliceClass::kGuaranteed, 0, &slice) != LedgerError::kOk) return 5;
    for (int i = slice * kLedgerSliceComputeEntries; i < (slice + 1) * kLedgerSliceComputeEntries; ++i) {
      LedgerComputeEntry& e = *l.ComputeEntry(i);
      uint64_t expected = 0;
      if (!e.state.compare_exchange_strong(expected, PackState(EntryState::kClaiming, me))) continue;
      if (!l.AcquireComputeEntry(i)) return 3;
      std::memcpy(e.uuid, kUuid, 16);
      e.state.store(PackState(EntryState::kAlive, me));
      r->entry.store(i);
      r->ready.store(1);
      pause();
      return 0;
    }
    return 4;
  });
  ASSERT_GT(mid, 0);
  WAIT_READY_OR_SKIP(r);
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  const int i = r->entry.load();
  ASSERT_EQ(l.MapUsage(ComputeSliceOf(i)), LedgerError::kOk);
  LedgerComputeEntry& e = *l.ComputeEntry(i);
  EXPECT_EQ(PidOf(e.state.load()), 1u);
  EXPECT_NE(e.pid_ns.load(), SelfPidNamespace());
  EXPECT_NE(e.start_time.load(), 0u);
  EXPECT_TRUE(l.ComputeOwnerAlive(i));
  PidResolver resolver("/proc", 0);
  EXPECT_EQ(resolver.Resolve(e.pid_ns.load(), 1, e.start_time.load()), static_cast<uint32_t>(r->host_pid.load()));
  // An entry published without its lock byte (an owner that never took it) is dead to
  // everyone outside its namespace.
  const int next = ComputeSliceOf(i) * kLedgerSliceComputeEntries + (ComputeEntryOf(i) + 1) % kLedgerSliceComputeEntries;
  LedgerComputeEntry& stale = *l.ComputeEntry(next);
  stale.pid_ns.store(e.pid_ns.load());
  stale.state.store(PackState(EntryState::kAlive, 1));
  EXPECT_FALSE(l.ComputeOwnerAlive(next));
  stale.state.store(0);

  ASSERT_GT(r->host_pid.load(), 1);
  kill(r->host_pid.load(), SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !l.ComputeOwnerAlive(i); }));
  int status = 0;
  ASSERT_EQ(waitpid(mid, &status, 0), mid);
  munmap(r, 4096);
}

TEST(PidResolver, MapsNamespacedPidsOnAFakeProc) {
  FakeProc proc;
  proc.Self(100);
  proc.Process(50, 100, "50", 777);              // the resolver's own namespace
  proc.Process(4242, 200, "4242\t7", 555);       // pid 7 of container namespace 200
  proc.Process(4243, 300, "4243\t7", 556);       // pid 7 of another container
  proc.Process(4244, 400, "4244\t12\t3", 558);   // nested twice: pid 3 of namespace 400
  proc.Process(4245, 500, "4245\t9", 559, 'Z');  // dead, not yet waited for
  PidResolver r(proc.root(), 0);
  EXPECT_EQ(r.own_namespace(), 100u);
  EXPECT_EQ(r.Resolve(200, 7, 555), 4242u);
  EXPECT_EQ(r.Resolve(300, 7, 556), 4243u);
  EXPECT_EQ(r.Resolve(300, 7, 0), 4243u);    // start time not checked
  EXPECT_EQ(r.Resolve(300, 7, 555), 0u);     // another process's start time
  EXPECT_EQ(r.Resolve(400, 3, 558), 4244u);  // the innermost pid names it
  EXPECT_EQ(r.Resolve(400, 12, 0), 0u);      // 12 is its pid in an intermediate namespace
  EXPECT_EQ(r.Resolve(500, 9, 0), 0u);       // a zombie
  EXPECT_EQ(r.Resolve(999, 7, 0), 0u);       // nobody
  EXPECT_EQ(r.Resolve(0, 7, 0), 0u);         // unknown namespace
  EXPECT_EQ(r.Resolve(100, 50, 777), 50u);   // same namespace: the pid as is
  EXPECT_EQ(r.Resolve(100, 50, 778), 0u);
  EXPECT_EQ(r.Resolve(100, 51, 0), 0u);      // not there
  // A cached hit is re-checked: once the process is gone, it no longer resolves.
  proc.Gone(4242);
  EXPECT_EQ(r.Resolve(200, 7, 555), 0u);
  // A process that appears later is found by the next scan.
  proc.Process(4300, 200, "4300\t8", 600);
  EXPECT_EQ(r.Resolve(200, 8, 600), 4300u);
}

TEST(PidResolver, RescansAtMostOncePerInterval) {
  FakeProc proc;
  proc.Self(100);
  proc.Process(4242, 200, "4242\t7", 555);
  PidResolver r(proc.root(), int64_t{3600} * 1'000'000'000);
  EXPECT_EQ(r.Resolve(200, 7, 555), 4242u);  // first miss: scans
  proc.Process(4243, 200, "4243\t8", 556);
  EXPECT_EQ(r.Resolve(200, 8, 556), 0u);     // a miss within the interval: no scan
  EXPECT_EQ(r.Resolve(200, 7, 555), 4242u);  // hits still answer
}

TEST(PidResolver, ResolvesItselfOnTheRealProc) {
  PidResolver r;
  const uint32_t me = static_cast<uint32_t>(getpid());
  ASSERT_NE(SelfPidNamespace(), 0u);
  EXPECT_EQ(r.own_namespace(), SelfPidNamespace());
  EXPECT_EQ(r.Resolve(SelfPidNamespace(), me, ProcessStartTime(me)), me);
  uint32_t inner = 0;
  ASSERT_TRUE(ReadInnermostPid("/proc/self/status", &inner));
  EXPECT_EQ(inner, me);
}

}  // namespace
}  // namespace gslice
