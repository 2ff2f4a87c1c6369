// The suspend board against a hostile local user (nobody, in a forked child that dropped
// root): it cannot close another process's gate, fake its activity or resume request,
// answer its memory request or ask for its move, fill its partition, make the service act on
// an entry that names somebody else's process, or make a root process follow a symbolic link
// or trust a board it planted. CI runs as root; elsewhere these tests skip.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "fake_driver.h"
#include "gslice/ledger.h"
#include "gslice/owner_lock.h"
#include "gslice/pid_namespace.h"
#include "gslice/suspend/service.h"
#include "gslice/suspend_board.h"
#include "scoped_path.h"

namespace gslice::suspend {
namespace {

namespace fs = std::filesystem;
constexpr uid_t kNobody = 65534;

// In a forked child: dies with its parent, and drops to uid/gid nobody (exit 99 if it cannot).
void BecomeNobody() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
      setresuid(kNobody, kNobody, kNobody) != 0) {
    _exit(99);
  }
}

// Runs body in a forked child as uid/gid nobody; its exit code (or 128+signal).
int AsNobody(const std::function<int()>& body) {
  pid_t kid = fork();
  if (kid == 0) {
    BecomeNobody();
    _exit(body());
  }
  int status = 0;
  waitpid(kid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Every regular file under path that the caller can open for writing, scribbled over (as a
// hostile script would), except files it owns itself. Returns how many.
int ScribbleOnEverythingWritable(const std::string& path) {
  int written = 0;
  std::error_code ec;
  std::vector<std::string> files;
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(path);
  for (fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  for (const std::string& f : files) {
    if (lstat(f.c_str(), &st) != 0 || st.st_uid == geteuid()) continue;
    int fd = open(f.c_str(), O_RDWR | O_NOFOLLOW);
    if (fd < 0) continue;
    ++written;
    const size_t n = static_cast<size_t>(st.st_size);
    void* p = n > 0 ? mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p != MAP_FAILED) {
      // Keep the headers (so the layout still opens); everything else becomes 0xff: gates
      // closed, activity moving, requests and replies posted.
      if (n > 4096) std::memset(static_cast<char*>(p) + 4096, 0xff, n - 4096);
      munmap(p, n);
    }
    close(fd);
  }
  return written;
}

class BoardHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (CI runs as root)";
    std::string error;
    ASSERT_TRUE(service_.Open(board_.c_str(), true, &error)) << error;
    ASSERT_TRUE(victim_.Open(board_.c_str(), nullptr, &error)) << error;
    const uint32_t me = static_cast<uint32_t>(getpid());
    entry_ = victim_.Claim(me, ProcessStartTime(me));
    ASSERT_NE(entry_, nullptr);
    service_.Refresh(true);  // the service makes the victim's gates
    ASSERT_TRUE(victim_.Attach());
    ASSERT_EQ(service_.LiveEntries().size(), 1u);
    ref_ = service_.LiveEntries()[0];
    service_.Own(ref_);
  }

  test::ScopedPath board_{"hostile-board"};
  SuspendServiceBoard service_;
  SuspendShimBoard victim_;
  SuspendShimEntry* entry_ = nullptr;
  SuspendServiceBoard::Ref ref_;
};

TEST_F(BoardHostileTest, AnotherUserCannotWriteAVictimsEntryGateOrReplies) {
  entry_->activity.store(41);
  const SuspendGateEntry* g = victim_.GateOf(*entry_);
  ASSERT_NE(g, nullptr);
  const uint64_t owner = entry_->owner.load();
  const int written = AsNobody([&] {
    // Every file of the board, and the victim's three by name.
    int n = ScribbleOnEverythingWritable(board_.path());
    for (const char* name : {"/service", "/gates/uid-0", "/shim/uid-0"}) {
      int fd = open((board_.path() + name).c_str(), O_RDWR);
      if (fd >= 0) {
        ++n;
        close(fd);
      }
    }
    return n;
  });
  EXPECT_EQ(written, 0) << "nobody opened files of the victim's for writing";
  // The victim is untouched: its gate open and still its own, its activity, no resume or
  // memory request, no reply, no move.
  EXPECT_EQ(g->owner.load(), owner);
  EXPECT_EQ(g->gate.load(), kGateOpen);
  EXPECT_EQ(victim_.GateWord(*entry_)->load(), kGateOpen);
  EXPECT_EQ(entry_->activity.load(), 41u);
  EXPECT_EQ(entry_->resume_request.load(), 0u);
  EXPECT_EQ(entry_->mem_request_seq.load(), 0u);
  EXPECT_EQ(g->mem_reply_seq.load(), 0u);
  EXPECT_EQ(g->move_seq.load(), 0u);
  EXPECT_EQ(entry_->owner.load(), owner);
  EXPECT_EQ(victim_.service()->service_pid.load(), 0u);
}

TEST_F(BoardHostileTest, AnotherUserCannotFillTheVictimsPartition) {
  // nobody fills every entry it can reach with live-looking claims (its pid, lock bytes
  // held) and stays alive holding them; its own partition is all it reaches.
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  pid_t attacker = fork();
  if (attacker == 0) {
    BecomeNobody();
    const uint32_t me = static_cast<uint32_t>(getpid());
    int filled = 0;
    std::vector<std::string> files;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(board_.path(), fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    // Its own partition too, made as its shim would.
    SuspendShimBoard own;
    std::string error;
    if (own.Open(board_.c_str(), nullptr, &error)) files.push_back(board_.path() + "/shim/" + own.partition_name());
    std::vector<int> fds;
    for (const std::string& f : files) {
      int fd = open(f.c_str(), O_RDWR | O_NOFOLLOW);
      if (fd < 0) continue;
      struct stat st;
      if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(SuspendPartitionLayout)) {
        close(fd);
        continue;
      }
      auto* p = static_cast<SuspendPartitionLayout*>(
          mmap(nullptr, sizeof(SuspendPartitionLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      if (p == MAP_FAILED || p->header.magic != kSuspendPartitionMagic) {
        close(fd);
        continue;
      }
      for (int i = 0; i < kSuspendPartitionEntries; ++i) {
        SuspendShimEntry& e = p->entries[i];
        e.pid_ns.store(SelfPidNamespace());
        e.start_time.store(ProcessStartTime(me));
        e.owner.store(BoardOwnerWord(me, static_cast<uint32_t>(i + 1)));
        LockOwnerByte(fd, SuspendEntryLockByte(i));
        ++filled;
      }
      p->header.high_water.store(kSuspendPartitionEntries);
      fds.push_back(fd);
    }
    const char report = static_cast<char>(filled / kSuspendPartitionEntries);
    if (write(to_parent[1], &report, 1) != 1) _exit(98);
    char c;
    (void)!read(to_child[0], &c, 1);  // holds its claims until told
    _exit(0);
  }
  char partitions_filled = 0;
  ASSERT_EQ(read(to_parent[0], &partitions_filled, 1), 1);
  EXPECT_EQ(partitions_filled, 1) << "nobody filled its own partition and nothing else";

  // Another root process still gets an entry (a fresh process: the victim already has one).
  pid_t newcomer = fork();
  if (newcomer == 0) {
    SuspendShimBoard b;
    std::string error;
    const uint32_t me = static_cast<uint32_t>(getpid());
    _exit(b.Open(board_.c_str(), nullptr, &error) && b.Claim(me, ProcessStartTime(me)) != nullptr ? 0 : 1);
  }
  int status = 0;
  waitpid(newcomer, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "root's partition was filled by nobody";
  // And nobody's full partition is ignored by the service beyond its per-uid bounds: the
  // victim's entry is still served.
  service_.Refresh(true);
  bool victim_live = false;
  for (const auto& r : service_.LiveEntries()) victim_live |= r.part == ref_.part && r.index == ref_.index;
  EXPECT_TRUE(victim_live);
  (void)!write(to_child[1], "x", 1);
  waitpid(attacker, nullptr, 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

TEST(BoardHostile, SymlinkOrDirectoryPlantedAtTheBoardPathIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (CI runs as root)";
  test::ScopedPath board("hostile-planted-board");
  test::ScopedPath target("hostile-planted-target");
  // A link to where root would make the board.
  ASSERT_EQ(AsNobody([&] { return symlink(target.c_str(), board.c_str()) == 0 ? 0 : 1; }), 0);
  std::string error;
  SuspendServiceBoard service;
  EXPECT_FALSE(service.Open(board.c_str(), true, &error));
  EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;
  SuspendShimBoard shim;
  EXPECT_FALSE(shim.Open(board.c_str(), nullptr, &error));
  struct stat st;
  EXPECT_NE(lstat(target.c_str(), &st), 0) << "root made something where the planted link points";
  // A directory of nobody's at the path: not trusted, not used, not changed.
  board.Remove();
  ASSERT_EQ(AsNobody([&] { return mkdir(board.c_str(), 0755) == 0 ? 0 : 1; }), 0);
  EXPECT_FALSE(service.Open(board.c_str(), true, &error));
  EXPECT_NE(error.find("uid 65534"), std::string::npos) << error;
  EXPECT_FALSE(shim.Open(board.c_str(), nullptr, &error));
  EXPECT_NE(error.find("uid 65534"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(board.path()));
}

TEST(BoardHostile, SymlinkPlantedAsAPartitionIsNotFollowed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (CI runs as root)";
  test::ScopedPath board("hostile-partition-board");
  test::ScopedPath target("hostile-partition-target");
  std::string error;
  SuspendServiceBoard service;
  ASSERT_TRUE(service.Open(board.c_str(), true, &error)) << error;
  // nobody takes root's partition name first, with a link and then as a file of its own.
  const std::string name = board.path() + "/shim/" + DefaultPartitionName();
  ASSERT_EQ(AsNobody([&] { return symlink(target.c_str(), name.c_str()) == 0 ? 0 : 1; }), 0);
  SuspendShimBoard shim;
  ASSERT_TRUE(shim.Open(board.c_str(), nullptr, &error)) << error;
  struct stat st;
  EXPECT_NE(lstat(target.c_str(), &st), 0) << "root followed the planted link";
  // Root's shim took a private partition instead, and the service serves it.
  EXPECT_EQ(std::string(shim.partition_name()).rfind(DefaultPartitionName() + ".", 0), 0u) << shim.partition_name();
  const uint32_t me = static_cast<uint32_t>(getpid());
  ASSERT_NE(shim.Claim(me, ProcessStartTime(me)), nullptr);
  service.Refresh(true);
  EXPECT_EQ(service.LiveEntries().size(), 1u);
  EXPECT_TRUE(shim.Attach());
}

TEST(BoardHostile, EntryNamingAnotherUsersProcessIsIgnored) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (CI runs as root)";
  test::ScopedPath board("hostile-forged-board");
  test::ScopedPath ledger("hostile-forged-ledger");
  std::string error;
  ASSERT_TRUE(CreateSuspendBoard(board.c_str(), &error)) << error;
  // The victim: a root process that is not on the board at all.
  pid_t victim = fork();
  if (victim == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) pause();
  }
  // This process is on the board honestly (the control).
  SuspendShimBoard own;
  ASSERT_TRUE(own.Open(board.c_str(), nullptr, &error)) << error;
  const uint32_t me = static_cast<uint32_t>(getpid());
  ASSERT_NE(own.Claim(me, ProcessStartTime(me)), nullptr);
  // nobody writes an entry in its own partition that names the victim, idle, with a resume
  // and a memory request, and stays to hold its lock byte.
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  pid_t attacker = fork();
  if (attacker == 0) {
    BecomeNobody();
    SuspendShimBoard b;
    std::string err;
    const uint32_t self = static_cast<uint32_t>(getpid());
    SuspendShimEntry* e = b.Open(board.c_str(), nullptr, &err) ? b.Claim(self, ProcessStartTime(self)) : nullptr;
    char ok = e != nullptr ? 1 : 0;
    if (e != nullptr) {
      e->start_time.store(ProcessStartTime(static_cast<uint32_t>(victim)));
      e->owner.store(BoardOwnerWord(static_cast<uint32_t>(victim), 4242));
      e->resume_request.store(1);
      e->mem_request_bytes.store(1 << 20);
      e->mem_request_seq.store(1);
      b.RingDoorbell();
    }
    (void)!write(to_parent[1], &ok, 1);
    char c;
    (void)!read(to_child[0], &c, 1);
    _exit(0);
  }
  char forged = 0;
  ASSERT_EQ(read(to_parent[0], &forged, 1), 1);
  ASSERT_EQ(forged, 1) << "nobody could not use its own partition";

  auto driver = std::make_unique<testing::FakeDriver>();
  testing::FakeDriver* d = driver.get();
  d->states[victim] = CU_PROCESS_STATE_RUNNING;
  d->states[static_cast<int>(me)] = CU_PROCESS_STATE_RUNNING;
  ServiceOptions o;
  o.ledger_path = ledger.path();
  o.board_path = board.path();
  o.host.reserve_bytes = 0;
  o.free_bytes = [](const std::string&) { return uint64_t{1} << 30; };
  auto service = SuspendService::CreateWithDriver(o, std::move(driver), &error);
  ASSERT_NE(service, nullptr) << error;
  service->Tick();
  auto snap = service->Snapshot();
  auto has = [&](int pid) {
    return std::any_of(snap.begin(), snap.end(), [pid](const ProcessStatus& s) { return s.info.pid == pid; });
  };
  EXPECT_TRUE(has(static_cast<int>(me)));  // the honest entry is served
  EXPECT_FALSE(has(victim)) << "the service took nobody's entry for the victim's";
  EXPECT_EQ(d->states[victim], CU_PROCESS_STATE_RUNNING);
  service.reset();

  (void)!write(to_child[1], "x", 1);
  waitpid(attacker, nullptr, 0);
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

}  // namespace
}  // namespace gslice::suspend
