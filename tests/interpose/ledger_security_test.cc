// Who may write what in the node ledger (docs/ledger.md, "Who may write what"): a local user
// other than the writer (here: nobody, as a hostile tenant) can neither change another
// slice's limits or usage, nor create, plant, replace or truncate anything in the ledger
// directory; planted symlinks and directories are refused, and nothing is created where they
// point. Run as root (CI): the hostile parts drop to nobody in a forked child.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <string.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "gslice/ledger.h"
#include "gslice/shrink_guard.h"

namespace gslice {
namespace {

constexpr uid_t kNobody = 65534;
const uint8_t kGpu[16] = {7, 7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
constexpr int64_t kVictimLimit = int64_t{4} << 30;
constexpr int64_t kOwnLimit = int64_t{1} << 30;

std::string TestPath(const char* name) { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-" + name; }

struct TestDir {
  explicit TestDir(const char* name) : path(TestPath(name)) { Remove(); }
  ~TestDir() { Remove(); }
  void Remove() const {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    char own[256];
    PerUserLedgerPath(path.c_str(), own, sizeof own);
    std::filesystem::remove_all(own, ec);
    std::filesystem::remove_all(path + "-u" + std::to_string(kNobody), ec);
  }
  std::string path;
};

constexpr uid_t kThisUser = static_cast<uid_t>(-1);

// Runs f in a forked child, as user `uid` (kThisUser: as this one); returns the child's exit
// status (0: every hostile attempt failed as it must), 128 + the signal that killed it, or 77:
// cannot drop privileges (not root).
int InChild(const std::function<int()>& f, uid_t uid = kThisUser) {
  pid_t pid = fork();
  if (pid == 0) {
    if (uid != kThisUser &&
        (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)) {
      _exit(77);
    }
    _exit(f());
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}
int AsUser(uid_t uid, const std::function<int()>& f) { return InChild(f, uid); }
int AsNobody(const std::function<int()>& f) { return InChild(f, kNobody); }

#define SKIP_UNLESS_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to act as another user)"

// The node ledger as gsliced makes it: a victim's slice (root's) and one of nobody's own.
struct NodeLedger {
  explicit NodeLedger(const std::string& path) {
    EXPECT_EQ(ledger.Open(path.c_str()), LedgerError::kOk) << ledger.detail();
    EXPECT_TRUE(ledger.writable());
    EXPECT_EQ(ledger.FindOrCreateSlice("victim", SliceClass::kGuaranteed, 0, &victim, 0), LedgerError::kOk);
    EXPECT_EQ(ledger.FindOrAddGpu(victim, kGpu, kVictimLimit, &victim_gpu), LedgerError::kOk);
    EXPECT_EQ(ledger.FindOrCreateSlice("tenant", SliceClass::kGuaranteed, 0, &own, kNobody), LedgerError::kOk)
        << ledger.detail();
    EXPECT_EQ(ledger.FindOrAddGpu(own, kGpu, kOwnLimit, &own_gpu), LedgerError::kOk);
    // The victim holds some memory.
    const uint32_t me = static_cast<uint32_t>(getpid());
    EXPECT_EQ(ledger.Attach(victim, me, ProcessStartTime(me), &victim_handle), LedgerError::kOk);
    EXPECT_EQ(ledger.Charge(victim_handle, victim_gpu, 100 << 20), ChargeResult::kOk);
  }
  Ledger ledger;
  int victim = -1, victim_gpu = -1, own = -1, own_gpu = -1;
  SliceHandle victim_handle;
};

TEST(LedgerSecurity, AnotherUserCannotWriteLimitsOrUsage) {
  SKIP_UNLESS_ROOT();
  TestDir dir("sec-write");
  NodeLedger node(dir.path);
  const std::string victim_usage = dir.path + "/slice-" + std::to_string(node.victim);
  const int victim = node.victim;
  const int victim_gpu = node.victim_gpu;
  const int rc = AsNobody([&]() -> int {
    int failures = 0;
    // The files themselves: neither limits nor another slice's usage opens for writing.
    if (open((dir.path + "/limits").c_str(), O_RDWR) >= 0) failures |= 1;
    if (open(victim_usage.c_str(), O_RDWR) >= 0) failures |= 2;
    if (truncate((dir.path + "/limits").c_str(), 0) == 0) failures |= 4;
    // Through the ledger: read-only, and a read-only mapping cannot be made writable.
    Ledger l;
    if (l.Open(dir.path.c_str()) != LedgerError::kOk || l.writable()) return 100;
    void* page = const_cast<LedgerLimits*>(l.limits());
    if (mprotect(page, sizeof(LedgerLimits), PROT_READ | PROT_WRITE) == 0) failures |= 8;
    l.SetLimit(victim, victim_gpu, int64_t{1} << 50);  // ignored: not the writer
    if (l.Limit(victim, victim_gpu) != kVictimLimit) failures |= 16;
    int gpu = -1;
    const uint8_t other[16] = {1};
    if (l.FindOrAddGpu(victim, other, -1, &gpu) != LedgerError::kNotPermitted) failures |= 32;
    SliceHandle h;
    const uint32_t me = static_cast<uint32_t>(getpid());
    if (l.Attach(victim, me, ProcessStartTime(me), &h) == LedgerError::kOk) failures |= 64;
    // Its usage is readable (compute coordination), never writable.
    if (l.MapUsage(victim) != LedgerError::kOk || l.usage_writable(victim)) failures |= 128;
    return failures;
  });
  ASSERT_NE(rc, 77) << "cannot drop privileges";
  EXPECT_EQ(rc, 0) << "hostile writes that succeeded (bit mask)";
  EXPECT_EQ(node.ledger.Limit(node.victim, node.victim_gpu), kVictimLimit);
  ASSERT_EQ(node.ledger.MapUsage(node.victim), LedgerError::kOk);
  EXPECT_EQ(node.ledger.SliceUsage(node.victim, node.victim_gpu), 100 << 20);
}

TEST(LedgerSecurity, AnotherUserCannotCreateFillOrPlant) {
  SKIP_UNLESS_ROOT();
  TestDir dir("sec-plant");
  NodeLedger node(dir.path);
  const int rc = AsNobody([&]() -> int {
    int failures = 0;
    Ledger l;
    if (l.Open(dir.path.c_str()) != LedgerError::kOk) return 100;
    // No slice of its making in the writer's table, let alone 64 of them.
    for (int i = 0; i < kLedgerMaxSlices; ++i) {
      int s = -1;
      const std::string name = "squat-" + std::to_string(i);
      if (l.FindOrCreateSlice(name.c_str(), SliceClass::kGuaranteed, 0, &s) != LedgerError::kNotPermitted) failures |= 1;
    }
    // Nothing planted, replaced or removed in the directory.
    const std::string d = dir.path;
    if (open((d + "/planted").c_str(), O_RDWR | O_CREAT | O_EXCL, 0666) >= 0) failures |= 2;
    if (symlink("/tmp", (d + "/slice-63").c_str()) == 0) failures |= 4;
    if (unlink((d + "/limits").c_str()) == 0) failures |= 8;
    if (rename((d + "/limits").c_str(), (d + "/old").c_str()) == 0) failures |= 16;
    if (unlink((d + "/slice-" + std::to_string(node.victim)).c_str()) == 0) failures |= 32;
    if (mkdir((d + "/sub").c_str(), 0777) == 0) failures |= 64;
    if (chmod(d.c_str(), 0777) == 0) failures |= 128;
    return failures;
  });
  ASSERT_NE(rc, 77) << "cannot drop privileges";
  EXPECT_EQ(rc, 0) << "hostile writes that succeeded (bit mask)";
  EXPECT_EQ(node.ledger.Limit(node.victim, node.victim_gpu), kVictimLimit);
  EXPECT_LT(node.ledger.FindSlice("squat-0"), 0);
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/planted"));
}

TEST(LedgerSecurity, ATenantChargesItsOwnSliceAndIsRefusedOverItsLimit) {
  SKIP_UNLESS_ROOT();
  TestDir dir("sec-own");
  NodeLedger node(dir.path);
  const int own = node.own;
  const int own_gpu = node.own_gpu;
  const int rc = AsNobody([&]() -> int {
    Ledger l;
    if (l.Open(dir.path.c_str()) != LedgerError::kOk) return 100;
    SliceHandle h;
    const uint32_t me = static_cast<uint32_t>(getpid());
    if (l.Attach(own, me, ProcessStartTime(me), &h) != LedgerError::kOk) return 1;
    if (l.Charge(h, own_gpu, kOwnLimit / 2) != ChargeResult::kOk) return 2;
    if (l.Charge(h, own_gpu, kOwnLimit) != ChargeResult::kOverLimit) return 3;
    if (l.SliceUsage(own, own_gpu) != kOwnLimit / 2) return 4;
    l.Detach(h);
    return 0;
  });
  ASSERT_NE(rc, 77) << "cannot drop privileges";
  EXPECT_EQ(rc, 0);
}

TEST(LedgerSecurity, APlantedSymlinkOrDirectoryIsRefused) {
  SKIP_UNLESS_ROOT();
  TestDir link("sec-link");
  TestDir target("sec-link-target");
  TestDir squat("sec-squat");
  // Another user plants a symlink where the ledger will be, and a directory of its own.
  ASSERT_EQ(AsNobody([&]() -> int {
              if (symlink(target.path.c_str(), link.path.c_str()) != 0) return 1;
              if (mkdir(squat.path.c_str(), 0755) != 0) return 2;
              return 0;
            }),
            0);
  Ledger l;
  EXPECT_EQ(l.Open(link.path.c_str()), LedgerError::kUntrusted);
  EXPECT_NE(std::string(l.detail()).find("symlink"), std::string::npos) << l.detail();
  EXPECT_FALSE(std::filesystem::exists(target.path)) << "created where the link points";
  EXPECT_EQ(l.Open(squat.path.c_str()), LedgerError::kUntrusted);
  EXPECT_NE(std::string(l.detail()).find("owned by another user"), std::string::npos) << l.detail();
  EXPECT_FALSE(std::filesystem::exists(squat.path + "/limits"));
  // A root-owned directory that others may write is refused too.
  TestDir open_dir("sec-0777");
  ASSERT_EQ(mkdir(open_dir.path.c_str(), 0755), 0);
  ASSERT_EQ(chmod(open_dir.path.c_str(), 0777), 0);
  EXPECT_EQ(l.Open(open_dir.path.c_str()), LedgerError::kUntrusted);
  EXPECT_NE(std::string(l.detail()).find("writable by group or others"), std::string::npos) << l.detail();
  // A process of a slice falls back to its own per-user ledger, never to the planted one.
  int slice = -1;
  char note[640] = {};
  ASSERT_EQ(OpenSliceLedger(&l, squat.path.c_str(), "", "mine", SliceClass::kGuaranteed, kSliceEphemeral, true, &slice,
                            note, sizeof note),
            LedgerError::kOk)
      << note;
  char own[256];
  PerUserLedgerPath(squat.path.c_str(), own, sizeof own);
  EXPECT_STREQ(l.path(), own);
  EXPECT_NE(std::string(note).find("owned by another user"), std::string::npos) << note;
}

// A pod as the device plugin sets it up: the ledger directory bind-mounted read-only, the
// container's own usage file read-write at GSLICE_LEDGER_USAGE. A process there (root, as in
// most containers) charges into its own slice and can write nothing else of the ledger.
TEST(LedgerSecurity, APodWritesOnlyItsOwnUsage) {
  SKIP_UNLESS_ROOT();
  TestDir dir("sec-pod");
  TestDir ro("sec-pod-ro");
  TestDir usage_mount("sec-pod-usage");
  NodeLedger node(dir.path);
  ASSERT_EQ(node.ledger.UpdateSlice(node.own, SliceClass::kGuaranteed, 0, 0, 0), LedgerError::kOk);  // a root container's
  const std::string own_usage = dir.path + "/slice-" + std::to_string(node.own);
  const std::string victim_usage = "/slice-" + std::to_string(node.victim);
  ASSERT_EQ(mkdir(ro.path.c_str(), 0755), 0);
  ASSERT_EQ(close(open(usage_mount.path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600)), 0);
  const int own_gpu = node.own_gpu;
  pid_t pid = fork();
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount(dir.path.c_str(), ro.path.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, ro.path.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0 ||
        mount(own_usage.c_str(), usage_mount.path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      _exit(77);
    }
    Ledger l;
    int slice = -1;
    char note[640] = {};
    if (OpenSliceLedger(&l, ro.path.c_str(), usage_mount.path.c_str(), "tenant", SliceClass::kGuaranteed, 0, true,
                        &slice, note, sizeof note) != LedgerError::kOk) {
      _exit(1);
    }
    if (std::string(l.path()) != ro.path || l.writable() || !l.usage_writable(slice)) _exit(2);
    SliceHandle h;
    const uint32_t me = static_cast<uint32_t>(getpid());
    if (l.Attach(slice, me, ProcessStartTime(me), &h) != LedgerError::kOk) _exit(3);
    if (l.Charge(h, own_gpu, kOwnLimit) != ChargeResult::kOk) _exit(4);
    if (l.Charge(h, own_gpu, 1) != ChargeResult::kOverLimit) _exit(5);
    int s = -1;
    if (l.FindOrCreateSlice("squat", SliceClass::kGuaranteed, 0, &s) != LedgerError::kNotPermitted) _exit(6);
    if (open((ro.path + "/limits").c_str(), O_RDWR) >= 0) _exit(7);
    if (open((ro.path + victim_usage).c_str(), O_RDWR) >= 0) _exit(8);
    if (open((ro.path + "/planted").c_str(), O_RDWR | O_CREAT, 0644) >= 0) _exit(9);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no mount namespace here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The charge landed in the node's usage file; the victim's limit is as set.
  ASSERT_EQ(node.ledger.MapUsage(node.own), LedgerError::kOk);
  EXPECT_EQ(node.ledger.Limit(node.victim, node.victim_gpu), kVictimLimit);
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/planted"));
}

TEST(LedgerSecurity, WithoutTheDaemonEachUserHasALedgerOfItsOwn) {
  SKIP_UNLESS_ROOT();
  TestDir dir("sec-peruser");
  {
    Ledger node;  // the node's directory, root's
    ASSERT_EQ(node.Open(dir.path.c_str()), LedgerError::kOk);
  }
  const int rc = AsNobody([&]() -> int {
    Ledger l;
    int slice = -1;
    char note[640] = {};
    if (OpenSliceLedger(&l, dir.path.c_str(), "", "run-1", SliceClass::kGuaranteed, kSliceEphemeral, true, &slice, note,
                        sizeof note) != LedgerError::kOk) {
      return 1;
    }
    // Not in root's table: in nobody's own directory, which it writes.
    if (std::string(l.path()) != dir.path + "-u65534" || !l.writable() || !l.usage_writable(slice)) return 2;
    struct stat st;
    if (stat(l.path(), &st) != 0 || st.st_uid != kNobody || (st.st_mode & 0777) != 0755) return 3;
    return 0;
  });
  ASSERT_NE(rc, 77) << "cannot drop privileges";
  EXPECT_EQ(rc, 0);
  Ledger node;
  ASSERT_EQ(node.Open(dir.path.c_str()), LedgerError::kOk);
  EXPECT_LT(node.FindSlice("run-1"), 0);
}

// A tenant may write its own usage file, and so truncate it (write permission is all the
// kernel asks). Whoever maps it must survive that: gsliced, the device plugin and tools map
// it under the shrink guard (a fault there reads zeros; the file is then refused until it has
// its size back), and a process without the guard (the shim) never maps it at all.
TEST(LedgerSecurity, ATenantShrinkingItsOwnUsageFileKillsNoReader) {
  SKIP_UNLESS_ROOT();
  TestDir dir("sec-shrink");
  NodeLedger node(dir.path);
  const std::string own_usage = dir.path + "/slice-" + std::to_string(node.own);
  const int own = node.own;
  const int own_gpu = node.own_gpu;
  const int rc = InChild([&]() -> int {
    Ledger l;  // a reader with the guard, as gsliced
    if (!InstallShrinkGuard() || l.Open(dir.path.c_str()) != LedgerError::kOk) return 1;
    if (l.MapUsage(own) != LedgerError::kOk) return 2;
    // The tenant charges into its own slice, then cuts the file to nothing.
    if (AsNobody([&]() -> int {
          Ledger t;
          SliceHandle h;
          const uint32_t me = static_cast<uint32_t>(getpid());
          if (t.Open(dir.path.c_str()) != LedgerError::kOk || t.Attach(own, me, ProcessStartTime(me), &h) != LedgerError::kOk) return 1;
          if (t.Charge(h, own_gpu, 5 << 20) != ChargeResult::kOk) return 2;
          return truncate(own_usage.c_str(), 0) == 0 ? 0 : 3;
        }) != 0) {
      return 3;
    }
    // Every read of the mapping gslice makes: no SIGBUS, only zeros.
    if (l.SliceUsage(own, own_gpu) != 0 || l.AliveCount(own) != 0 || l.Reap(own) != 0) return 4;
    if (ShrunkMappingCount() != 1) return 5;
    // Refused while it is short, with the reason; mapped again once its owner restores it.
    if (l.MapUsage(own) != LedgerError::kUntrusted || strstr(l.detail(), "another size") == nullptr) return 6;
    if (AsNobody([&]() -> int { return truncate(own_usage.c_str(), sizeof(LedgerUsage)) == 0 ? 0 : 1; }) != 0) return 7;
    return l.MapUsage(own) == LedgerError::kNoSliceEntry ? 0 : 8;  // zeros: no header of this generation
  });
  EXPECT_EQ(rc, 0) << "the reader " << (rc > 128 ? "died of signal " + std::to_string(rc - 128) : "failed step " + std::to_string(rc));
}

// The shim runs inside applications and installs no signal handler: it maps no usage file
// another user owns, and its gate sees other slices' compute entries through copies that a
// shrink turns into free entries.
TEST(LedgerSecurity, WithoutTheGuardOtherUsersUsageIsCopiedNeverMapped) {
  SKIP_UNLESS_ROOT();
  TestDir dir("sec-copy");
  NodeLedger node(dir.path);
  const std::string own_usage = dir.path + "/slice-" + std::to_string(node.own);
  const int own = node.own;
  // The tenant writes what it likes into its own page (here: launches of entry 0).
  ASSERT_EQ(AsNobody([&]() -> int {
              Ledger t;
              if (t.Open(dir.path.c_str()) != LedgerError::kOk || t.MapUsage(own) != LedgerError::kOk || !t.usage_writable(own)) return 1;
              t.usage(own)->head.compute[0].launches.store(4242);
              return 0;
            }),
            0);
  // A process of another user, as the shim runs: no guard. It reads nobody's page through its
  // window while nobody cuts the file (the two pipes order the steps).
  int go[2], ready[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(ready), 0);
  pid_t reader = fork();
  if (reader == 0) {
    const int rc = AsUser(65533, [&]() -> int {
      ForbidShrinkGuard();
      if (InstallShrinkGuard()) return 1;
      Ledger l;
      if (l.Open(dir.path.c_str()) != LedgerError::kOk) return 2;
      if (l.MapUsage(node.victim) != LedgerError::kOk) return 3;  // the writer's (root's): trusted
      // nobody's: refused, with the reason.
      if (l.MapUsage(own) != LedgerError::kUntrusted || strstr(l.detail(), "could shrink it") == nullptr) return 4;
      ComputeWindow w;
      if (!w.Init(&l, -1)) return 5;
      w.Refresh();
      const int first = own * kLedgerSliceComputeEntries;
      if (!w.mapped(own) || w.entry(first).launches.load() != 4242) return 6;
      char c = 1;
      if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) return 7;  // nobody truncates now
      w.Sync(uint64_t{1} << own);
      for (int i = first; i < first + kLedgerSliceComputeEntries; ++i) {
        if (w.entry(i).state.load() != 0 || w.entry(i).launches.load() != 0) return 8;
      }
      w.Refresh();
      return w.entry(first).launches.load() == 0 ? 0 : 9;
    });
    _exit(rc);
  }
  close(ready[1]);  // a reader that stops early ends the wait below
  close(go[0]);
  char c = 0;
  if (read(ready[0], &c, 1) == 1) {
    EXPECT_EQ(AsNobody([&]() -> int { return truncate(own_usage.c_str(), 0) == 0 ? 0 : 1; }), 0);
    EXPECT_EQ(write(go[1], &c, 1), 1);
  }
  close(go[1]);
  close(ready[0]);
  int status = 0;
  ASSERT_EQ(waitpid(reader, &status, 0), reader);
  EXPECT_TRUE(WIFEXITED(status)) << "the reader died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed step";
}
}  // namespace
}  // namespace gslice
