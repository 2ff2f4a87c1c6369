// The node ledger: charge/release arithmetic, the limit under racing chargers (threads and
// processes), reaping of killed processes, and creation races.
#include "gslice/ledger.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace gslice {
namespace {

std::string TempLedgerPath(const char* name) {
  return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-" + name;
}

// A ledger directory of the test's own, removed with everything in it (also on failure).
struct LedgerFile {
  explicit LedgerFile(const char* name) : path(TempLedgerPath(name)) { Remove(); }
  ~LedgerFile() { Remove(); }
  void Remove() const { std::filesystem::remove_all(path); }
  std::string limits() const { return path + "/limits"; }
  std::string path;
};

// The limits file mapped writable, as only its owner could: to model a broken or foreign file.
LedgerLimits* MapLimitsForTest(const std::string& file) {
  int fd = open(file.c_str(), O_RDWR);
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, sizeof(LedgerLimits), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<LedgerLimits*>(p);
}

const uint8_t kUuidA[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const uint8_t kUuidB[16] = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};

TEST(Ledger, CreatesAndValidatesLayout) {
  LedgerFile f("layout");
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  EXPECT_TRUE(l.writable());  // the directory is ours
  EXPECT_EQ(l.limits()->header.magic, kLedgerMagic);
  EXPECT_EQ(l.limits()->header.version, kLedgerVersion);
  EXPECT_EQ(l.limits()->header.size, sizeof(LedgerLimits));
  struct stat st;
  ASSERT_EQ(stat(f.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(stat(f.limits().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // A second mapping sees the same ledger.
  Ledger l2;
  ASSERT_EQ(l2.Open(f.path.c_str()), LedgerError::kOk);
  int s1 = -1, s2 = -1;
  ASSERT_EQ(l.FindOrCreateSlice("train", SliceClass::kGuaranteed, 0, &s1), LedgerError::kOk);
  ASSERT_EQ(l2.FindOrCreateSlice("train", SliceClass::kGuaranteed, 0, &s2), LedgerError::kOk);
  EXPECT_EQ(s1, s2);
  // Its usage file: created for this generation, 0644, owned by the slice's owner.
  ASSERT_EQ(stat((f.path + "/slice-" + std::to_string(s1)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(l.limits()->slices[s1].owner_uid, geteuid());
}

// A guaranteed slice's protection level: written by the writer on creation and update, read
// by every mapping; 0 stands for the default; a level outside 0.5..1 is refused, not stored.
TEST(Ledger, WritesTheProtectionLevel) {
  LedgerFile f("protect");
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  int a = -1, b = -1, again = -1;
  ASSERT_EQ(l.FindOrCreateSlice("a", SliceClass::kGuaranteed, 0, &a, kLedgerOwnerCaller, 900), LedgerError::kOk);
  ASSERT_EQ(l.FindOrCreateSlice("b", SliceClass::kGuaranteed, 0, &b), LedgerError::kOk);
  Ledger reader;
  ASSERT_EQ(reader.Open(f.path.c_str()), LedgerError::kOk);
  EXPECT_EQ(reader.limits()->slices[a].protect_permille, 900u);
  EXPECT_EQ(reader.limits()->slices[b].protect_permille, 0u);
  EXPECT_EQ(EffectiveProtectPermille(reader.limits()->slices[b].protect_permille), kProtectDefaultPermille);
  // A slice found keeps its own level.
  ASSERT_EQ(l.FindOrCreateSlice("a", SliceClass::kGuaranteed, 0, &again, kLedgerOwnerCaller, 800), LedgerError::kOk);
  EXPECT_EQ(again, a);
  EXPECT_EQ(reader.limits()->slices[a].protect_permille, 900u);
  ASSERT_EQ(l.UpdateSlice(b, SliceClass::kGuaranteed, 0, kLedgerOwnerCaller, 800), LedgerError::kOk);
  EXPECT_EQ(reader.limits()->slices[b].protect_permille, 800u);
  for (uint32_t bad : {1u, 499u, 1001u, 970000u}) {
    int c = -1;
    EXPECT_EQ(l.FindOrCreateSlice("c", SliceClass::kGuaranteed, 0, &c, kLedgerOwnerCaller, bad), LedgerError::kBadArgument)
        << bad;
    EXPECT_EQ(l.UpdateSlice(b, SliceClass::kGuaranteed, 0, kLedgerOwnerCaller, bad), LedgerError::kBadArgument) << bad;
  }
  EXPECT_EQ(l.FindSlice("c"), -1);
  EXPECT_EQ(reader.limits()->slices[b].protect_permille, 800u);
}

TEST(Ledger, RefusesIncompatibleFile) {
  LedgerFile f("incompatible");
  {
    Ledger l;
    ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  }
  LedgerLimits* raw = MapLimitsForTest(f.limits());
  ASSERT_NE(raw, nullptr);
  raw->header.version = kLedgerVersion + 1;
  munmap(raw, sizeof(LedgerLimits));
  Ledger l;
  EXPECT_EQ(l.Open(f.path.c_str()), LedgerError::kIncompatible);
  EXPECT_NE(std::string(l.detail()).find("layout version"), std::string::npos) << l.detail();
}

TEST(Ledger, RefusesALedgerFileOfAnOlderVersion) {
  LedgerFile f("oldfile");
  int fd = open(f.path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0666);
  ASSERT_GE(fd, 0);
  close(fd);
  Ledger l;
  EXPECT_EQ(l.Open(f.path.c_str()), LedgerError::kIncompatible);
  EXPECT_NE(std::string(l.detail()).find("version 3 or older"), std::string::npos) << l.detail();
  unlink(f.path.c_str());
}

TEST(Ledger, RecoversFromCreatorKilledMidInit) {
  LedgerFile f("halfinit");
  ASSERT_EQ(mkdir(f.path.c_str(), 0755), 0);
  // A creator that made the file and died before sizing it.
  int fd = open(f.limits().c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    Ledger l;
    ASSERT_EQ(l.Open(f.path.c_str(), 200), LedgerError::kOk);
    EXPECT_EQ(l.limits()->header.initialised.load(), 1u);
  }
  // One that sized it and died before writing the header.
  ASSERT_EQ(truncate(f.limits().c_str(), 0), 0);
  ASSERT_EQ(truncate(f.limits().c_str(), static_cast<off_t>(sizeof(LedgerLimits))), 0);
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str(), 200), LedgerError::kOk);
  EXPECT_EQ(l.limits()->header.magic, kLedgerMagic);
}

TEST(Ledger, WaitsForALiveInitialiserAndGivesUpBounded) {
  LedgerFile f("locked");
  ASSERT_EQ(mkdir(f.path.c_str(), 0755), 0);
  int lfd = open((f.path + "/lock").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(lfd, 0);
  int fd = open(f.limits().c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(flock(lfd, LOCK_EX), 0);  // an initialiser that never finishes
  Ledger l;
  EXPECT_EQ(l.Open(f.path.c_str(), 100), LedgerError::kInitTimeout);
  flock(lfd, LOCK_UN);
  close(lfd);
  EXPECT_EQ(l.Open(f.path.c_str(), 100), LedgerError::kOk);
}

TEST(Ledger, LeavesAFileOfAnotherSizeAlone) {
  LedgerFile f("othersize");
  ASSERT_EQ(mkdir(f.path.c_str(), 0755), 0);
  int fd = open(f.limits().c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  Ledger l;
  EXPECT_EQ(l.Open(f.path.c_str(), 100), LedgerError::kIncompatible);
  struct stat st;
  ASSERT_EQ(stat(f.limits().c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4096);
}

TEST(Ledger, ChargeReleaseAndLimit) {
  Ledger l;
  ASSERT_EQ(l.OpenPrivate(), LedgerError::kOk);
  SliceHandle h;
  ASSERT_EQ(l.AttachByName("s", SliceClass::kGuaranteed, 0, static_cast<uint32_t>(getpid()),
                           ProcessStartTime(static_cast<uint32_t>(getpid())), &h),
            LedgerError::kOk);
  int ga = -1, gb = -1;
  ASSERT_EQ(l.FindOrAddGpu(h.slice, kUuidA, 1000, &ga), LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(h.slice, kUuidB, -1, &gb), LedgerError::kOk);
  EXPECT_NE(ga, gb);
  EXPECT_EQ(l.Charge(h, ga, 600), ChargeResult::kOk);
  EXPECT_EQ(l.Charge(h, ga, 401), ChargeResult::kOverLimit);
  EXPECT_EQ(l.SliceUsage(h.slice, ga), 600);  // a refusal changes nothing
  EXPECT_EQ(l.Charge(h, ga, 400), ChargeResult::kOk);
  EXPECT_EQ(l.SliceUsage(h.slice, ga), 1000);
  l.Release(h, ga, 600);
  EXPECT_EQ(l.Charge(h, ga, 600), ChargeResult::kOk);
  EXPECT_EQ(l.Charge(h, gb, int64_t{1} << 50), ChargeResult::kOk);  // unlimited GPU
  l.Detach(h);
  EXPECT_EQ(l.SliceUsage(h.slice, ga), 0);
}

// gslice set: the writer changes a limit and the compute policy while processes of the slice
// hold memory; their next charge and their next policy read see the change.
TEST(Ledger, ALimitAndPolicyChangedWhileAttachedApplyToTheNextRead) {
  Ledger l;
  ASSERT_EQ(l.OpenPrivate(), LedgerError::kOk);
  SliceHandle h;
  ASSERT_EQ(l.AttachByName("s", SliceClass::kGuaranteed, 0, static_cast<uint32_t>(getpid()),
                           ProcessStartTime(static_cast<uint32_t>(getpid())), &h),
            LedgerError::kOk);
  int g = -1;
  ASSERT_EQ(l.FindOrAddGpu(h.slice, kUuidA, 1000, &g), LedgerError::kOk);
  EXPECT_EQ(l.ComputePolicy(h.slice, g).cap_permille, -1);  // not set: the environment applies
  EXPECT_EQ(l.ComputePolicy(h.slice, g).share_permille, -1);
  EXPECT_EQ(l.Charge(h, g, 600), ChargeResult::kOk);
  l.SetLimit(h.slice, g, 2000);
  EXPECT_EQ(l.Charge(h, g, 1000), ChargeResult::kOk);  // grown: 1600 of 2000
  l.SetLimit(h.slice, g, 1700);
  EXPECT_EQ(l.Charge(h, g, 200), ChargeResult::kOverLimit);
  EXPECT_EQ(l.Charge(h, g, 100), ChargeResult::kOk);
  l.SetComputePolicy(h.slice, g, kGpuPolicySet | 300, kGpuPolicySet | 0);
  EXPECT_EQ(l.ComputePolicy(h.slice, g).cap_permille, 300);
  EXPECT_EQ(l.ComputePolicy(h.slice, g).share_permille, 0);  // set, to none
  EXPECT_EQ(l.ComputePolicy(h.slice, kLedgerMaxGpus).cap_permille, -1);
  l.Detach(h);
}

TEST(Ledger, ThreadsNeverExceedTheLimit) {
  Ledger l;
  ASSERT_EQ(l.OpenPrivate(), LedgerError::kOk);
  int slice = -1, g = -1;
  ASSERT_EQ(l.FindOrCreateSlice("t", SliceClass::kGuaranteed, 0, &slice), LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(slice, kUuidA, 100, &g), LedgerError::kOk);
  // Each thread acts as its own process slot (pid = our pid; same liveness).
  constexpr int kThreads = 8;
  std::vector<SliceHandle> handles(kThreads);
  for (auto& h : handles) ASSERT_EQ(l.Attach(slice, static_cast<uint32_t>(getpid()), 0, &h), LedgerError::kOk);
  // committed rises after a granted charge and falls before the release, so it never
  // exceeds what the ledger holds: its maximum bounds the committed total.
  std::atomic<int64_t> committed{0};
  std::atomic<int64_t> max_committed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int64_t held = 0;
      for (int i = 0; i < 2000; ++i) {
        int64_t n = 1 + (i * 7 + t) % 13;
        if (l.Charge(handles[t], g, n) == ChargeResult::kOk) {
          held += n;
          int64_t c = committed.fetch_add(n) + n;
          int64_t m = max_committed.load();
          while (c > m && !max_committed.compare_exchange_weak(m, c)) {
          }
        } else {
          // Refused: the slice is at its limit. Give everything back and start again.
          committed.fetch_sub(held);
          l.Release(handles[t], g, held);
          held = 0;
        }
      }
      committed.fetch_sub(held);
      l.Release(handles[t], g, held);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(l.SliceUsage(slice, g), 0);
  EXPECT_LE(max_committed.load(), 100);
  EXPECT_GT(max_committed.load(), 100 - 13);  // the limit was actually reached
}

// Processes racing on one shared ledger: together they reach the limit, never more.
TEST(Ledger, ProcessesShareOneLimit) {
  LedgerFile f("procs");
  constexpr int kProcs = 6;
  constexpr int64_t kLimit = 1000;
  constexpr int64_t kChunk = 100;
  struct Shared {
    std::atomic<int> granted;
    std::atomic<int> stop;
  };
  auto* shared = static_cast<Shared*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(shared, MAP_FAILED);
  new (shared) Shared{{0}, {0}};
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Ledger l;
      if (l.Open(f.path.c_str()) != LedgerError::kOk) _exit(2);
      SliceHandle h;
      uint32_t me = static_cast<uint32_t>(getpid());
      if (l.AttachByName("shared", SliceClass::kGuaranteed, 0, me, ProcessStartTime(me), &h) != LedgerError::kOk) _exit(3);
      int g = -1;
      if (l.FindOrAddGpu(h.slice, kUuidA, kLimit, &g) != LedgerError::kOk) _exit(4);
      // Keep asking (racing the others) until told to stop; hold what is granted.
      while (shared->stop.load() == 0) {
        if (l.Charge(h, g, kChunk) == ChargeResult::kOk) shared->granted.fetch_add(1);
        usleep(100);
      }
      pause();  // hold until killed; the parent reaps
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (int i = 0; i < 5000 && shared->granted.load() < kLimit / kChunk; ++i) usleep(1000);
  usleep(100000);  // the processes keep asking for a while at the limit
  shared->stop.store(1);
  usleep(10000);
  EXPECT_EQ(shared->granted.load(), kLimit / kChunk);  // exactly the limit, never more
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  int slice = l.FindSlice("shared");
  ASSERT_GE(slice, 0);
  ASSERT_EQ(l.MapUsage(slice), LedgerError::kOk);
  int g = l.FindGpu(slice, kUuidA);
  ASSERT_GE(g, 0);
  EXPECT_EQ(l.SliceUsage(slice, g), kLimit);
  for (pid_t k : kids) kill(k, SIGKILL);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  EXPECT_EQ(l.Reap(slice), kProcs);
  EXPECT_EQ(l.SliceUsage(slice, g), 0);
  munmap(shared, 4096);
}

TEST(Ledger, ReapsZombiesAndPidReuse) {
  Ledger l;
  ASSERT_EQ(l.OpenPrivate(), LedgerError::kOk);
  int slice = -1, g = -1;
  ASSERT_EQ(l.FindOrCreateSlice("z", SliceClass::kGuaranteed, 0, &slice), LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(slice, kUuidA, 1000, &g), LedgerError::kOk);
  pid_t kid = fork();
  if (kid == 0) {
    pause();
    _exit(0);
  }
  SliceHandle h;
  ASSERT_EQ(l.Attach(slice, static_cast<uint32_t>(kid), ProcessStartTime(static_cast<uint32_t>(kid)), &h), LedgerError::kOk);
  ASSERT_EQ(l.Charge(h, g, 700), ChargeResult::kOk);
  EXPECT_EQ(l.Reap(slice), 0);  // alive
  kill(kid, SIGKILL);
  // Not waited for yet: a zombie still has a /proc entry but counts as dead.
  for (int i = 0; i < 200 && ProcessAlive(static_cast<uint32_t>(kid), 0); ++i) usleep(1000);
  EXPECT_EQ(l.Reap(slice), 1);
  EXPECT_EQ(l.SliceUsage(slice, g), 0);
  waitpid(kid, nullptr, 0);
  // A slot whose pid is alive but whose start time differs (pid reused) is reaped too.
  SliceHandle h2;
  ASSERT_EQ(l.Attach(slice, static_cast<uint32_t>(getpid()), 12345, &h2), LedgerError::kOk);
  ASSERT_EQ(l.Charge(h2, g, 10), ChargeResult::kOk);
  EXPECT_EQ(l.Reap(slice), 1);
}

TEST(Ledger, RefusalReapsDeadHolderFirst) {
  Ledger l;
  ASSERT_EQ(l.OpenPrivate(), LedgerError::kOk);
  int slice = -1, g = -1;
  ASSERT_EQ(l.FindOrCreateSlice("r", SliceClass::kGuaranteed, 0, &slice), LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(slice, kUuidA, 1000, &g), LedgerError::kOk);
  pid_t kid = fork();
  if (kid == 0) _exit(0);
  waitpid(kid, nullptr, 0);  // dead before it is even attached: its slot is stale
  SliceHandle dead, me;
  ASSERT_EQ(l.Attach(slice, static_cast<uint32_t>(kid), 1, &dead), LedgerError::kOk);
  l.ForceCharge(dead, g, 900);
  ASSERT_EQ(l.Attach(slice, static_cast<uint32_t>(getpid()), 0, &me), LedgerError::kOk);
  EXPECT_EQ(l.Charge(me, g, 500), ChargeResult::kOk);  // reaped on the refusal path
  EXPECT_EQ(l.SliceUsage(slice, g), 500);
}

TEST(Ledger, EphemeralSlicesAreRecycled) {
  Ledger l;
  ASSERT_EQ(l.OpenPrivate(), LedgerError::kOk);
  pid_t kid = fork();
  if (kid == 0) _exit(0);
  waitpid(kid, nullptr, 0);
  for (int i = 0; i < kLedgerMaxSlices; ++i) {
    SliceHandle h;
    std::string name = "eph-" + std::to_string(i);
    ASSERT_EQ(l.AttachByName(name.c_str(), SliceClass::kGuaranteed, kSliceEphemeral, static_cast<uint32_t>(kid), 1, &h), LedgerError::kOk);
  }
  // Full of slices whose only process is dead: a new one recycles one of them.
  SliceHandle h;
  EXPECT_EQ(l.AttachByName("fresh", SliceClass::kGuaranteed, kSliceEphemeral, static_cast<uint32_t>(getpid()), 0, &h), LedgerError::kOk);
  EXPECT_GE(l.FindSlice("fresh"), 0);
}

TEST(Ledger, ManyProcessesAttachAtOnce) {
  LedgerFile f("attach64");
  constexpr int kProcs = 64;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Ledger l;
      if (l.Open(f.path.c_str()) != LedgerError::kOk) _exit(2);
      SliceHandle h;
      uint32_t me = static_cast<uint32_t>(getpid());
      if (l.AttachByName("crowd", SliceClass::kGuaranteed, 0, me, ProcessStartTime(me), &h) != LedgerError::kOk) _exit(3);
      int g = -1;
      if (l.FindOrAddGpu(h.slice, kUuidA, 1 << 20, &g) != LedgerError::kOk) _exit(4);
      if (l.Charge(h, g, 1) != ChargeResult::kOk) _exit(5);
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int st = 0;
    ASSERT_EQ(waitpid(k, &st, 0), k);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  }
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  int slice = l.FindSlice("crowd");
  ASSERT_GE(slice, 0);
  // Exactly one slice and one GPU entry, 64 distinct slots.
  int named = 0;
  for (auto& s : l.limits()->slices) named += (StateOf(s.state.load()) == EntryState::kReady && std::string(s.name) == "crowd");
  EXPECT_EQ(named, 1);
  ASSERT_EQ(l.MapUsage(slice), LedgerError::kOk);
  int g = l.FindGpu(slice, kUuidA);
  EXPECT_EQ(l.SliceUsage(slice, g), kProcs);
  EXPECT_EQ(l.Reap(slice), kProcs);
  EXPECT_EQ(l.SliceUsage(slice, g), 0);
}

}  // namespace
}  // namespace gslice

namespace gslice {
namespace {

// The claim protocol of compute entries (ComputeWindow::ClaimEntry, ReleaseEntry,
// OwnerAliveElseFree): an entry is claimed ALIVE with its fields set, the slice's entries run
// out, a dead owner's entry is freed and taken, and a released entry is free for the next.
TEST(LedgerComputeClaims, ClaimReleaseAndReclaimFromTheDead) {
  LedgerFile f("claims");
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  int slice = -1;
  ASSERT_EQ(l.FindOrCreateSlice("claims", SliceClass::kGuaranteed, 0, &slice), LedgerError::kOk);
  ASSERT_EQ(l.MapUsage(slice), LedgerError::kOk);
  ComputeWindow w;
  ASSERT_TRUE(w.Init(&l, slice));
  // A process that claims one entry and dies without releasing it (killed).
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Ledger cl;
    ComputeWindow cw;
    if (cl.Open(f.path.c_str()) != LedgerError::kOk || cl.MapUsage(slice) != LedgerError::kOk || !cw.Init(&cl, slice)) _exit(2);
    LedgerComputeEntry* e = cw.ClaimEntry(kUuidA, SliceClass::kOpportunistic, 300);
    const int index = e == nullptr ? -1 : cw.index_of(e);
    if (write(fds[1], &index, sizeof index) != static_cast<ssize_t>(sizeof index)) _exit(3);
    pause();
    _exit(0);
  }
  close(fds[1]);
  int dead = -1;
  ASSERT_EQ(read(fds[0], &dead, sizeof dead), static_cast<ssize_t>(sizeof dead));
  close(fds[0]);
  ASSERT_GE(dead, 0);
  EXPECT_TRUE(w.OwnerAliveElseFree(dead)) << "alive while its owner lives";

  LedgerComputeEntry* mine = w.ClaimEntry(kUuidB, SliceClass::kGuaranteed, 500 | kComputeShareSet);
  ASSERT_NE(mine, nullptr);
  const int index = w.index_of(mine);
  EXPECT_EQ(ComputeSliceOf(index), slice);
  EXPECT_NE(index, dead);
  EXPECT_EQ(mine->state.load(), PackState(EntryState::kAlive, static_cast<uint32_t>(getpid())));
  EXPECT_EQ(memcmp(mine->uuid, kUuidB, 16), 0);
  EXPECT_EQ(mine->slice_class.load(), static_cast<uint32_t>(SliceClass::kGuaranteed));
  EXPECT_EQ(mine->share_permille.load(), 500 | kComputeShareSet);
  EXPECT_EQ(mine->launches.load(), 0u);
  EXPECT_TRUE(w.OwnerAlive(index));
  EXPECT_TRUE(l.ComputeOwnerAlive(index)) << "the lock byte is held";

  // The rest of the slice's entries, then none.
  std::vector<LedgerComputeEntry*> rest;
  for (int i = 0; i < kLedgerSliceComputeEntries - 2; ++i) {
    LedgerComputeEntry* e = w.ClaimEntry(kUuidA, SliceClass::kGuaranteed, 1000);
    ASSERT_NE(e, nullptr) << i;
    rest.push_back(e);
  }
  EXPECT_EQ(w.ClaimEntry(kUuidA, SliceClass::kGuaranteed, 1000), nullptr) << "every entry has a live owner";

  // Its owner killed, the dead entry is freed and taken by the next claim.
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  LedgerComputeEntry* taken = w.ClaimEntry(kUuidA, SliceClass::kGuaranteed, 1000);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(w.index_of(taken), dead);
  EXPECT_EQ(taken->slice_class.load(), static_cast<uint32_t>(SliceClass::kGuaranteed)) << "the fields are the new owner's";

  // Released: FREE, its times cleared, and claimable again.
  mine->active_until_ns.store(INT64_MAX);
  w.ReleaseEntry(mine);
  EXPECT_EQ(StateOf(mine->state.load()), EntryState::kFree);
  EXPECT_EQ(mine->active_until_ns.load(), 0);
  EXPECT_FALSE(w.OwnerAliveElseFree(index));
  LedgerComputeEntry* again = w.ClaimEntry(kUuidB, SliceClass::kOpportunistic, 1000);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(w.index_of(again), index);
  w.ReleaseEntry(again);
  w.ReleaseEntry(taken);
  for (LedgerComputeEntry* e : rest) w.ReleaseEntry(e);
}

// A dead owner's entry of the caller's own slice is freed by OwnerAliveElseFree; one of another
// slice is only reported dead (that slice frees it).
TEST(LedgerComputeClaims, OnlyTheOwnSlicesDeadEntriesAreFreed) {
  LedgerFile f("claims-other");
  Ledger l;
  ASSERT_EQ(l.Open(f.path.c_str()), LedgerError::kOk);
  int mine = -1, other = -1;
  ASSERT_EQ(l.FindOrCreateSlice("mine", SliceClass::kGuaranteed, 0, &mine), LedgerError::kOk);
  ASSERT_EQ(l.FindOrCreateSlice("other", SliceClass::kGuaranteed, 0, &other), LedgerError::kOk);
  ASSERT_EQ(l.MapUsage(mine), LedgerError::kOk);
  ASSERT_EQ(l.MapUsage(other), LedgerError::kOk);
  // An ALIVE entry in each slice whose owner never took its lock byte: dead to everyone.
  const uint64_t word = PackState(EntryState::kAlive, static_cast<uint32_t>(getpid()));
  const int in_mine = mine * kLedgerSliceComputeEntries + 3, in_other = other * kLedgerSliceComputeEntries + 3;
  l.ComputeEntry(in_mine)->pid_ns.store(1);  // another namespace: judged by its lock byte alone
  l.ComputeEntry(in_other)->pid_ns.store(1);
  l.ComputeEntry(in_mine)->state.store(word);
  l.ComputeEntry(in_other)->state.store(word);
  ComputeWindow w;
  ASSERT_TRUE(w.Init(&l, mine));
  w.Refresh();
  ASSERT_TRUE(w.mapped(other));
  EXPECT_FALSE(w.OwnerAliveElseFree(in_mine));
  EXPECT_EQ(StateOf(l.ComputeEntry(in_mine)->state.load()), EntryState::kFree);
  EXPECT_FALSE(w.OwnerAliveElseFree(in_other));
  EXPECT_EQ(l.ComputeEntry(in_other)->state.load(), word) << "another slice's entry only expires";
}

}  // namespace
}  // namespace gslice
