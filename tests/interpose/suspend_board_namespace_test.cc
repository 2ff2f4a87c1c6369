// The suspend board across pid namespaces (containers): an entry owned from another namespace
// is alive while its owner lives (though its pid means nothing here, or names another
// process), is taken over once the owner is killed, and the service's presence is seen from
// inside a container. Each test makes its board (a directory) and removes it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "gslice/suspend_board.h"
#include "pid_namespace_fixture.h"
#include "scoped_path.h"

namespace gslice {
namespace {

// A board made for the test (as gsliced makes it) and removed afterwards, also on failure.
struct BoardFile {
  explicit BoardFile(const char* name) : dir(name), path(dir.path()) {
    std::string error;
    made = CreateSuspendBoard(path.c_str(), &error);
    EXPECT_TRUE(made) << error;
  }
  // This process's partition file (uid-<euid>).
  std::string Partition() const { return path + "/shim/" + DefaultPartitionName(); }
  test::ScopedPath dir;
  std::string path;
  bool made = false;
};

// The test's partition, named explicitly: in the namespaced children (a new user namespace
// without a uid map) the effective uid reads as the overflow uid.
bool OpenShim(SuspendShimBoard& b, const std::string& path, const std::string& partition = DefaultPartitionName()) {
  std::string error;
  return b.Open(path.c_str(), partition.c_str(), &error);
}

// A container's first process (pid 1 there) that claims a board entry, reports its index and
// stays until killed.
pid_t SpawnClaimer(const std::string& path, Report* r) {
  return SpawnInNewPidNamespace(r, [path, r, partition = DefaultPartitionName()] {
    SuspendShimBoard board;
    if (!OpenShim(board, path, partition)) return 3;
    const uint32_t me = static_cast<uint32_t>(getpid());
    SuspendShimEntry* e = board.Claim(me, ProcessStartTime(me));
    if (e == nullptr) return 4;
    r->entry.store(board.IndexOf(*e));
    r->ready.store(1);
    for (;;) pause();
  });
}

void KillAndWait(Report* r, pid_t mid) {
  kill(r->host_pid.load(), SIGKILL);
  int status = 0;
  waitpid(mid, &status, 0);
}

TEST(SuspendBoardNamespaces, EntryOfAnotherNamespaceIsKeptWhileItLivesAndReusedAfterKill) {
  BoardFile f("board-ns");
  SuspendShimBoard board;
  ASSERT_TRUE(OpenShim(board, f.path)) << strerror(errno);
  Report* a = NewReport();
  ASSERT_NE(a, nullptr);
  pid_t mid_a = SpawnClaimer(f.path, a);
  ASSERT_GT(mid_a, 0);
  WAIT_READY_OR_SKIP(a);
  SuspendShimEntry& ea = board.partition()->entries[a->entry.load()];
  const uint64_t word_a = ea.owner.load();
  const uint64_t ns_a = ea.pid_ns.load();
  EXPECT_EQ(BoardOwnerPid(word_a), 1u);  // it knows itself as pid 1 of its namespace
  EXPECT_NE(ns_a, SelfPidNamespace());
  EXPECT_TRUE(ByteLockedInFile(f.Partition(), SuspendEntryLockByte(a->entry.load())));

  // Pid 1 here is init, with another start time: by pid the owner would look dead.
  EXPECT_TRUE(board.OwnerAlive(ea));
  EXPECT_EQ(board.Reap(), 0);
  EXPECT_EQ(ea.owner.load(), word_a);
  EXPECT_EQ(board.Find(ns_a, 1), &ea);
  EXPECT_EQ(board.Find(SelfPidNamespace(), 1), nullptr);  // our pid 1 is not that process

  // Another container's pid 1 starts its search at the same entry: it must take another.
  Report* b = NewReport();
  ASSERT_NE(b, nullptr);
  pid_t mid_b = SpawnClaimer(f.path, b);
  ASSERT_GT(mid_b, 0);
  WAIT_READY_OR_SKIP(b);
  EXPECT_NE(b->entry.load(), a->entry.load());
  EXPECT_EQ(ea.owner.load(), word_a);
  // b lives on until the end: had it died, the kernel could give the next container's pid
  // namespace b's freed namespace number, and that container's pid 1 would rightly take b's
  // dead entry as its own earlier one instead of a's.

  // Killed: the kernel dropped its lock byte, so it is dead to everyone.
  KillAndWait(a, mid_a);
  EXPECT_FALSE(ByteLockedInFile(f.Partition(), SuspendEntryLockByte(a->entry.load())));
  EXPECT_FALSE(board.OwnerAlive(ea));
  // A third container's pid 1 takes the dead entry over (no reap needed first).
  Report* c = NewReport();
  ASSERT_NE(c, nullptr);
  pid_t mid_c = SpawnClaimer(f.path, c);
  ASSERT_GT(mid_c, 0);
  WAIT_READY_OR_SKIP(c);
  EXPECT_EQ(c->entry.load(), a->entry.load());
  EXPECT_NE(ea.owner.load(), word_a);  // a new claim tag
  EXPECT_TRUE(board.OwnerAlive(ea));
  KillAndWait(c, mid_c);
  KillAndWait(b, mid_b);
  // And a reap frees them.
  EXPECT_GE(board.Reap(), 2);
  EXPECT_EQ(ea.owner.load(), 0u);
  EXPECT_EQ(board.partition()->entries[b->entry.load()].owner.load(), 0u);
}

TEST(SuspendBoardNamespaces, ClaimInOurNamespaceIsJudgedByPidToo) {
  BoardFile f("board-pid");
  SuspendShimBoard board;
  ASSERT_TRUE(OpenShim(board, f.path)) << strerror(errno);
  // A child that claims and exits: its lock goes with it and its pid is gone.
  pid_t kid = fork();
  if (kid == 0) {
    SuspendShimBoard b;
    const uint32_t me = static_cast<uint32_t>(getpid());
    _exit(OpenShim(b, f.path) && b.Claim(me, ProcessStartTime(me)) != nullptr ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(kid, &status, 0), kid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  SuspendShimEntry* e = nullptr;
  for (auto& x : board.partition()->entries) {
    if (BoardOwnerPid(x.owner.load()) == static_cast<uint32_t>(kid)) e = &x;
  }
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(board.Find(SelfPidNamespace(), static_cast<uint32_t>(kid)), e);
  EXPECT_FALSE(board.OwnerAlive(*e));
  EXPECT_EQ(board.Reap(), 1);
  EXPECT_EQ(e->owner.load(), 0u);
  // Our own claim lives, and claiming again returns the same entry.
  const uint32_t me = static_cast<uint32_t>(getpid());
  SuspendShimEntry* mine = board.Claim(me, ProcessStartTime(me));
  ASSERT_NE(mine, nullptr);
  EXPECT_TRUE(board.OwnerAlive(*mine));
  EXPECT_EQ(board.Claim(me, ProcessStartTime(me)), mine);
  EXPECT_EQ(board.Reap(), 0);
}

TEST(SuspendBoardNamespaces, ServiceInAnotherNamespaceIsSeenAlive) {
  BoardFile f("board-service");
  SuspendServiceBoard board;
  std::string error;
  ASSERT_TRUE(board.Open(f.path.c_str(), true, &error)) << error;
  board.SetService();
  EXPECT_TRUE(board.ServiceAlive());
  Report* r = NewReport();
  ASSERT_NE(r, nullptr);
  // The container's view, polled: r->slot = 1 while it sees a live service, 0 once it does not.
  const std::string path = f.path;
  pid_t mid = SpawnInNewPidNamespace(r, [path, r, partition = DefaultPartitionName()] {
    SuspendShimBoard b;
    if (!OpenShim(b, path, partition)) return 3;
    r->slot.store(b.ServiceAlive() ? 1 : 0);
    r->ready.store(1);
    for (;;) {
      r->slot.store(b.ServiceAlive() ? 1 : 0);
      usleep(1000);
    }
  });
  ASSERT_GT(mid, 0);
  WAIT_READY_OR_SKIP(r);
  EXPECT_TRUE(WaitFor([&] { return r->slot.load() == 1; }));
  board.ClearService();
  EXPECT_FALSE(board.ServiceAlive());
  EXPECT_TRUE(WaitFor([&] { return r->slot.load() == 0; }));
  KillAndWait(r, mid);
}

// Files of another layout version are refused, not reinterpreted; so is the one-file board
// of version 2.
TEST(SuspendBoard, RefusesAnotherVersion) {
  BoardFile f("board-version");
  {
    SuspendShimBoard board;
    ASSERT_TRUE(OpenShim(board, f.path));
    board.partition()->header.version = 2;
  }
  SuspendShimBoard again;
  std::string error;
  errno = 0;
  EXPECT_FALSE(again.Open(f.path.c_str(), nullptr, &error));
  EXPECT_EQ(errno, EPROTO);
  EXPECT_NE(error.find("version 2"), std::string::npos) << error;

  test::ScopedPath old("board-v2");
  FILE* file = fopen(old.c_str(), "w");
  ASSERT_NE(file, nullptr);
  fclose(file);
  SuspendShimBoard v2;
  EXPECT_FALSE(v2.Open(old.c_str(), nullptr, &error));
  EXPECT_EQ(errno, ENOTDIR);
  EXPECT_NE(error.find("older gslice"), std::string::npos) << error;
  SuspendServiceBoard service;
  EXPECT_FALSE(service.Open(old.c_str(), true, &error));
  EXPECT_NE(error.find("older gslice"), std::string::npos) << error;
}

}  // namespace
}  // namespace gslice
