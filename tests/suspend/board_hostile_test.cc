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
#include <memory>
#include <set>
#include <string>
#include <vector>

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
// Another unprivileged user, the victim of a squat: a uid with no account (none is needed).
constexpr uid_t kVictim = 65533;

// In a forked child: dies with its parent, and drops to uid/gid `uid` (exit 99 if it cannot).
void BecomeUser(uid_t uid) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(99);
}
void BecomeNobody() { BecomeUser(kNobody); }

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

// A process of `uid` on the board, as its shim puts it there: a forked child that opens the
// board (its default partition), claims an entry, reports, and stays until Stop().
class BoardTenant {
 public:
  struct Report {
    int ok = 0;  // 1: on the board with an entry of its own
    char partition[kSuspendPartitionNameMax + 1] = {};
    char error[256] = {};
    char notice[512] = {};  // what its shim logs about the partition it uses
  };

  BoardTenant(const std::string& board, uid_t uid) {
    int up[2];
    if (pipe(up) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      BecomeUser(uid);
      close(up[0]);
      Report r;
      SuspendShimBoard b;
      std::string error;
      const uint32_t me = static_cast<uint32_t>(getpid());
      r.ok = b.Open(board.c_str(), nullptr, &error) && b.Claim(me, ProcessStartTime(me)) != nullptr ? 1 : 0;
      std::snprintf(r.partition, sizeof r.partition, "%s", b.is_open() ? b.partition_name() : "");
      std::snprintf(r.error, sizeof r.error, "%s", error.c_str());
      std::snprintf(r.notice, sizeof r.notice, "%s", b.notice().c_str());
      if (write(up[1], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) _exit(98);
      for (;;) pause();
    }
    close(up[1]);
    ready_ = pid_ > 0 && read(up[0], &report_, sizeof report_) == static_cast<ssize_t>(sizeof report_);
    close(up[0]);
  }
  ~BoardTenant() { Stop(); }
  BoardTenant(const BoardTenant&) = delete;
  BoardTenant& operator=(const BoardTenant&) = delete;

  // Ends the process (killed: no clean-up of its own runs) and waits for it.
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool on_board() const { return ready_ && report_.ok == 1; }
  int pid() const { return pid_; }
  const Report& report() const { return report_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
  Report report_;
};

// What this process writes to stderr (the service's log) while it lives.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = dup(2);
    if (file_ != nullptr && saved_ >= 0) dup2(fileno(file_), 2);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      dup2(saved_, 2);
      close(saved_);
    }
    if (file_ != nullptr) std::fclose(file_);
  }
  std::string Text() const {
    std::fflush(stderr);
    std::string out;
    char buf[4096];
    ssize_t n = 0;
    for (off_t at = 0; file_ != nullptr && (n = pread(fileno(file_), buf, sizeof buf, at)) > 0; at += n) out.append(buf, n);
    return out;
  }

 private:
  FILE* file_ = nullptr;
  int saved_ = -1;
};

// Names in folder that start with prefix.
std::vector<std::string> NamesStartingWith(const std::string& folder, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
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

TEST(BoardHostile, SquattedPartitionNameIsWorkedAroundVisiblyAndLeavesNothingBehind) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as other users (CI runs as root)";
  test::ScopedPath board("hostile-squat-board");
  test::ScopedPath ledger_path("hostile-squat-ledger");
  std::string error;
  ASSERT_TRUE(CreateSuspendBoard(board.c_str(), &error)) << error;
  const std::string shim = board.path() + "/shim/";
  const std::string victim_name = "uid-" + std::to_string(kVictim);
  // nobody takes the victim's partition name before the victim's first process.
  ASSERT_EQ(AsNobody([&] {
              const int fd = open((shim + victim_name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
              return fd >= 0 && close(fd) == 0 ? 0 : 1;
            }),
            0);
  // More processes of the victim than the service serves partitions of one uid.
  constexpr int kProcesses = kSuspendPartitionsPerUid + 2;
  std::vector<std::unique_ptr<BoardTenant>> victims;
  std::set<std::string> partitions;
  for (int i = 0; i < kProcesses; ++i) {
    victims.push_back(std::make_unique<BoardTenant>(board.path(), kVictim));
    ASSERT_TRUE(victims.back()->on_board()) << victims.back()->report().error;
    partitions.insert(victims.back()->report().partition);
    // Its shim says why, naming the taker.
    EXPECT_NE(std::string(victims.back()->report().notice).find("of uid 65534"), std::string::npos)
        << victims.back()->report().notice;
  }
  EXPECT_EQ(partitions.count(victim_name), 0u) << "the victim's processes used the squatter's file";
  EXPECT_EQ(partitions.size(), 1u) << "the victim's processes share one partition in place of the taken name";

  // The victim's processes are in a slice reclaimed after 1 s idle (their ledger slots, made here).
  const uint8_t gpu_uuid[16] = {0x5e, 0x9a, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_path.c_str()), LedgerError::kOk);
  int slice = -1, gpu = -1;
  ASSERT_EQ(ledger.FindOrCreateSlice("victims", SliceClass::kGuaranteed, 0, &slice), LedgerError::kOk);
  ASSERT_EQ(ledger.FindOrAddGpu(slice, gpu_uuid, -1, &gpu), LedgerError::kOk);
  auto driver = std::make_unique<testing::FakeDriver>();
  testing::FakeDriver* d = driver.get();
  for (const auto& v : victims) {
    const uint32_t pid = static_cast<uint32_t>(v->pid());
    SliceHandle h;
    ASSERT_EQ(ledger.Attach(slice, pid, ProcessStartTime(pid), &h), LedgerError::kOk);
    ledger.ForceCharge(h, gpu, 1 << 20);
    d->states[v->pid()] = CU_PROCESS_STATE_RUNNING;
  }
  ServiceOptions o;
  o.ledger_path = ledger_path.path();
  o.board_path = board.path();
  o.host.reserve_bytes = 0;
  o.free_bytes = [](const std::string&) { return uint64_t{1} << 30; };
  o.idle_timeout_s = [](const std::string& slice_name) { return slice_name == "victims" ? 1 : 0; };
  StderrCapture log;
  auto service = SuspendService::CreateWithDriver(o, std::move(driver), &error);
  ASSERT_NE(service, nullptr) << error;

  // Idle reclaim reaches every process of the victim.
  auto reclaimed = [&](const BoardTenant& v) { return d->states[v.pid()] == CU_PROCESS_STATE_CHECKPOINTED; };
  auto all_reclaimed = [&] {
    return std::all_of(victims.begin(), victims.end(), [&](const auto& v) { return reclaimed(*v); });
  };
  for (int i = 0; i < 400 && !all_reclaimed(); ++i) {
    service->Tick();
    usleep(50'000);
  }
  for (const auto& v : victims) {
    EXPECT_TRUE(reclaimed(*v)) << "pid " << v->pid() << " (partition " << v->report().partition
                               << ") was never reclaimed";
  }
  // The service said what happened, naming the squatter, and removed its file: the victim's
  // next process uses its own partition again.
  EXPECT_NE(log.Text().find("uid 65534"), std::string::npos) << log.Text();
  struct stat st;
  EXPECT_TRUE(lstat((shim + victim_name).c_str(), &st) != 0 || st.st_uid == kVictim) << "the squat is still there";
  {
    BoardTenant later(board.path(), kVictim);
    ASSERT_TRUE(later.on_board()) << later.report().error;
    EXPECT_EQ(std::string(later.report().partition), victim_name);
    EXPECT_STREQ(later.report().notice, "");
  }

  // Once the victim's processes are gone, nothing of theirs is left but that partition.
  for (auto& v : victims) v->Stop();
  service->Tick();
  EXPECT_EQ(NamesStartingWith(shim, victim_name + "."), std::vector<std::string>{});
  EXPECT_EQ(NamesStartingWith(board.path() + "/gates/", victim_name + "."), std::vector<std::string>{});
  service.reset();
}

TEST(BoardHostile, TakenNamesOfEveryKindAreRemovedAndNothingElseIsTouched) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as other users (CI runs as root)";
  test::ScopedPath board("hostile-taken-board");
  test::ScopedPath target("hostile-taken-target");  // root's file that a planted link names
  test::ScopedPath own("hostile-taken-own");        // nobody's file, linked in under a name
  std::string error;
  ASSERT_TRUE(CreateSuspendBoard(board.c_str(), &error)) << error;
  {
    FILE* f = std::fopen(target.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("keep", f);
    std::fclose(f);
    ASSERT_EQ(chmod(target.c_str(), 0644), 0);
  }
  const std::string shim = board.path() + "/shim/";
  auto name = [&](uid_t uid) { return shim + "uid-" + std::to_string(uid); };
  // nobody takes five users' names: a link to root's file, a directory with things in it, a
  // file, a fifo, and a hard link to a file of its own elsewhere.
  ASSERT_EQ(AsNobody([&] {
              const std::string dir = name(65532);
              int fd = -1;
              const bool ok = symlink(target.c_str(), name(65533).c_str()) == 0 && mkdir(dir.c_str(), 0777) == 0 &&
                              mkdir((dir + "/sub").c_str(), 0777) == 0 &&
                              (fd = open((dir + "/sub/file").c_str(), O_CREAT | O_WRONLY, 0666)) >= 0 &&
                              close(fd) == 0 && symlink(target.c_str(), (dir + "/link").c_str()) == 0 &&
                              (fd = open(name(65531).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)) >= 0 &&
                              close(fd) == 0 && mkfifo(name(65530).c_str(), 0666) == 0 &&
                              (fd = open(own.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)) >= 0 && close(fd) == 0 &&
                              link(own.c_str(), name(65529).c_str()) == 0;
              return ok ? 0 : 1;
            }),
            0);

  StderrCapture log;
  SuspendServiceBoard service;
  ASSERT_TRUE(service.Open(board.c_str(), true, &error)) << error;
  struct stat st;
  for (uid_t uid : {65533u, 65532u, 65531u, 65530u}) {
    EXPECT_NE(lstat(name(uid).c_str(), &st), 0) << name(uid) << " is still there";
  }
  // Nothing the link named was touched; nobody's own file under another name is left as it
  // was, and so is that name, with a line that says so.
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_size, 4);
  ASSERT_EQ(stat(own.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(lstat(name(65529).c_str(), &st), 0);
  const std::string text = log.Text();
  EXPECT_NE(text.find("shim/uid-65529 is a file of uid 65534, not uid 65529's"), std::string::npos) << text;
  EXPECT_NE(text.find("hard links"), std::string::npos) << text;
  EXPECT_NE(text.find("shim/uid-65532 was a directory of uid 65534"), std::string::npos) << text;

  // Each victim's next process uses its own partition; the one whose name is still taken
  // uses a fallback, which the service serves.
  for (uid_t uid : {65533u, 65532u, 65531u, 65530u}) {
    BoardTenant v(board.path(), uid);
    ASSERT_TRUE(v.on_board()) << v.report().error;
    EXPECT_EQ(std::string(v.report().partition), "uid-" + std::to_string(uid));
  }
  BoardTenant v(board.path(), 65529);
  ASSERT_TRUE(v.on_board()) << v.report().error;
  EXPECT_EQ(std::string(v.report().partition).rfind("uid-65529.", 0), 0u) << v.report().partition;
  service.Refresh(true);
  bool served = false;
  for (const auto& r : service.LiveEntries()) {
    served |= service.partitions()[r.part].name == v.report().partition && BoardOwnerPid(r.owner) == uint32_t(v.pid());
  }
  EXPECT_TRUE(served);
}

TEST(BoardHostile, FallbackPartitionIsKeptWhileHeldAndRemovedWhenNot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as other users (CI runs as root)";
  test::ScopedPath board("hostile-fallback-board");
  std::string error;
  ASSERT_TRUE(CreateSuspendBoard(board.c_str(), &error)) << error;
  const std::string shim = board.path() + "/shim/";
  const std::string victim_name = "uid-" + std::to_string(kVictim);
  ASSERT_EQ(AsNobody([&] { return mkdir((shim + victim_name).c_str(), 0755) == 0 ? 0 : 1; }), 0);

  // No service runs: a killed process's fallback is removed by the user's next process that
  // falls back, which makes its own (one fallback at a time, nothing left behind).
  auto first = std::make_unique<BoardTenant>(board.path(), kVictim);
  ASSERT_TRUE(first->on_board()) << first->report().error;
  const std::string first_partition = first->report().partition;
  first->Stop();
  BoardTenant second(board.path(), kVictim);
  ASSERT_TRUE(second.on_board()) << second.report().error;
  EXPECT_NE(std::string(second.report().partition), first_partition);
  EXPECT_EQ(NamesStartingWith(shim, victim_name + "."), std::vector<std::string>{second.report().partition});

  // A process that has opened a fallback and claimed nothing yet holds it too: the service
  // keeps it, and removes it (and its gates) once that process is gone.
  SuspendServiceBoard service;
  ASSERT_TRUE(service.Open(board.c_str(), true, &error)) << error;
  auto held = std::make_unique<SuspendShimBoard>();
  {
    // Root's own name, taken the same way (the service has just removed the victim's).
    ASSERT_EQ(AsNobody([&] { return mkdir((shim + "uid-0").c_str(), 0755) == 0 ? 0 : 1; }), 0);
    ASSERT_TRUE(held->Open(board.c_str(), nullptr, &error)) << error;
  }
  const std::string held_name = held->partition_name();
  ASSERT_EQ(held_name.rfind("uid-0.", 0), 0u) << held_name;
  EXPECT_NE(held->notice().find("a directory of uid 65534"), std::string::npos) << held->notice();
  service.Refresh(true);
  EXPECT_FALSE(service.Prune());
  struct stat st;
  EXPECT_EQ(lstat((shim + held_name).c_str(), &st), 0) << "removed while a process held it";
  EXPECT_EQ(lstat((board.path() + "/gates/" + held_name).c_str(), &st), 0);
  held.reset();
  EXPECT_TRUE(service.Prune());
  EXPECT_NE(lstat((shim + held_name).c_str(), &st), 0);
  EXPECT_NE(lstat((board.path() + "/gates/" + held_name).c_str(), &st), 0);
  // The victim's live fallback stayed all along.
  EXPECT_EQ(lstat((shim + second.report().partition).c_str(), &st), 0);
}

}  // namespace
}  // namespace gslice::suspend
