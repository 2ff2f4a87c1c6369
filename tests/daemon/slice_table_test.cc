// Shares of the node's slice table (registry.h: SliceTableShares, AdmitToTable): what one user
// or project may hold and the entries kept for admins, counted from what the registry holds
// (its slices, slices deleted while their processes run on, entries of the ledger it does not
// know), over a real SQLite file and the real node ledger in shared memory.
#include <gtest/gtest.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <filesystem>

#include "daemon_test_support.h"
#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "ledger_binding.h"
#include "registry.h"
#include "store.h"

namespace gslice {
namespace {

using testing::kGiB;

constexpr int64_t kNobody = 65534;

Slice Owned(const std::string& name, const std::string& user, int64_t uid, const std::string& project = "default") {
  Slice s;
  s.name = name;
  s.user = user;
  s.owner_uid = uid;
  s.project = project;
  return s;
}

TEST(AdmitToTable, AUserHoldsAtMostItsShareCountingWhatItMayChange) {
  const SliceTableShares shares{.per_user = 2};
  // nobody's by uid, nobody's by name (stored before owners had uids), alice's.
  const std::vector<Slice> slices = {Owned("a", "nobody", kNobody), Owned("b", "nobody", -1),
                                     Owned("c", "alice", 1000)};
  Status refused = AdmitToTable(Owned("new", "nobody", kNobody), false, slices, {}, 0, shares, "default");
  EXPECT_EQ(refused.code(), 409);
  EXPECT_EQ(refused.message(),
            "nobody (uid 65534) holds 2 slices, the most one user may hold (slices_per_user = 2 in gsliced's "
            "configuration): delete one that is no longer needed (`gslice ls`, `gslice delete NAME`), or ask an "
            "admin (root or a member of gsliced's admin_group) to raise slices_per_user");
  EXPECT_TRUE(AdmitToTable(Owned("new", "alice", 1000), false, slices, {}, 0, shares, "default").ok());
  // Another account of the same name is another user.
  EXPECT_TRUE(AdmitToTable(Owned("new", "nobody", 4242), false, {slices[0]}, {}, 0, shares, "default").ok());
  // Admins are not limited.
  EXPECT_TRUE(AdmitToTable(Owned("new", "nobody", kNobody), true, slices, {}, 0, shares, "default").ok());
  // A slice deleted while its processes run on still takes its entry, and counts.
  Status deleted = AdmitToTable(Owned("new", "alice", 1000), false, slices, {Owned("c", "alice", 1000)}, 0, shares,
                                "default");
  EXPECT_EQ(deleted.code(), 409);
  EXPECT_NE(deleted.message().find("alice (uid 1000) holds 2 slices (1 of them deleted, their processes still "
                                   "running)"),
            std::string::npos)
      << deleted.message();
}

TEST(AdmitToTable, AProjectOtherThanTheDefaultHoldsAtMostItsShare) {
  const SliceTableShares shares{.per_project = 2};
  const std::vector<Slice> slices = {Owned("a", "alice", 1000, "team"), Owned("b", "bob", 1001, "team"),
                                     Owned("c", "alice", 1000), Owned("d", "bob", 1001)};
  Status refused = AdmitToTable(Owned("new", "carol", 1002, "team"), false, slices, {}, 0, shares, "default");
  EXPECT_EQ(refused.code(), 409);
  EXPECT_NE(refused.message().find("project team holds 2 slices, the most one project may hold (slices_per_project = 2"),
            std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("to raise slices_per_project"), std::string::npos) << refused.message();
  EXPECT_TRUE(AdmitToTable(Owned("new", "carol", 1002, "team"), true, slices, {}, 0, shares, "default").ok());
  EXPECT_TRUE(AdmitToTable(Owned("new", "carol", 1002, "other"), false, slices, {}, 0, shares, "default").ok());
  // The default project is the node's common pool: the table and the users' shares bound it.
  EXPECT_TRUE(AdmitToTable(Owned("new", "carol", 1002), false, slices, {}, 0, shares, "default").ok());
}

TEST(AdmitToTable, TheLastEntriesAreForAdminsAndAFullTableForNoOne) {
  const SliceTableShares shares{.entries = 8, .reserved_for_admins = 2};
  std::vector<Slice> slices;
  for (int i = 0; i < 5; ++i) slices.push_back(Owned("s" + std::to_string(i), "alice", 1000));
  const Slice bob = Owned("new", "bob", 1001);
  EXPECT_TRUE(AdmitToTable(bob, false, slices, {}, 0, shares, "default").ok());  // 3 free
  // Entries of the ledger no registry slice holds count as well.
  Status reserved = AdmitToTable(bob, false, slices, {}, 1, shares, "default");
  EXPECT_EQ(reserved.code(), 409);
  EXPECT_EQ(reserved.message(),
            "the node's slice table has 2 of its 8 entries free, and the last 2 are kept for admins "
            "(slices_reserved_for_admins in gsliced's configuration): delete a slice that is no longer needed, or "
            "ask an admin (root or a member of gsliced's admin_group) to make room");
  EXPECT_EQ(AdmitToTable(bob, false, slices, {Owned("gone", "alice", 1000)}, 0, shares, "default").code(), 409);
  EXPECT_TRUE(AdmitToTable(bob, true, slices, {}, 2, shares, "default").ok());
  Status full = AdmitToTable(bob, true, slices, {}, 3, shares, "default");
  EXPECT_EQ(full.code(), 409);
  EXPECT_NE(full.message().find("the node's slice table is full: all 8 entries (one per slice) are taken"),
            std::string::npos)
      << full.message();
}

class SliceTableTest : public ::testing::Test {
 protected:
  void TearDown() override {
    registry_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) unlink((db_ + suffix).c_str());
    std::filesystem::remove_all(ledger_);
  }
  void Open(Registry::Options options) {
    registry_.reset();
    auto store = Store::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    auto ledger = OpenNodeLedger(ledger_);
    ASSERT_TRUE(ledger.ok()) << ledger.status().message();
    registry_ = std::make_unique<Registry>(std::move(options), std::move(store.value()),
                                           std::make_unique<testing::FixedInventory>(testing::TestGpus()),
                                           std::move(ledger.value()), MakeUnavailableSuspender());
    Status s = registry_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    registry_->Sample();
  }
  // A small opportunistic slice for `user` (uid), as the API asks for one.
  Result<Slice> Create(const std::string& name, const std::string& user, int64_t uid,
                       const std::string& origin = "api", bool by_admin = false) {
    SliceRequest r;
    r.name = name;
    r.user = user;
    r.owner_uid = uid;
    r.slice_class = SliceClass::kOpportunistic;
    r.origin = origin;
    r.gpus = {{"0", 64ull << 20, 0}};
    return registry_->CreateSlice(r, by_admin);
  }
  // A shimmed process (this test) in slice `name` of the node ledger, made there if missing
  // (`gslice run` without gsliced).
  SliceHandle Attach(Ledger* app, const std::string& name) {
    const uint32_t pid = static_cast<uint32_t>(getpid());
    SliceHandle h;
    EXPECT_EQ(app->AttachByName(name.c_str(), SliceClass::kOpportunistic, kSliceEphemeral, pid, ProcessStartTime(pid),
                                &h),
              LedgerError::kOk);
    return h;
  }
  bool InLedger(const std::string& name) {
    Ledger l;
    return l.Open(ledger_.c_str()) == LedgerError::kOk && l.FindSlice(name.c_str()) >= 0;
  }

  std::string db_ = testing::UniquePath("slice-table.db", "/tmp");
  std::string ledger_ = testing::UniquePath("ledger");
  std::unique_ptr<Registry> registry_;
};

TEST_F(SliceTableTest, AUsersShareIsCountedFromWhatTheRegistryHolds) {
  Open({.shares = {.per_user = 3}});
  for (const char* name : {"n1", "n2", "n3"}) ASSERT_TRUE(Create(name, "nobody", kNobody).ok()) << name;
  // Whatever the request says (another name, a `gslice run` registration), the fourth is refused,
  // and nothing of it reaches the ledger.
  for (const char* origin : {"api", "run"}) {
    Result<Slice> refused = Create("n4", "nobody", kNobody, origin);
    ASSERT_FALSE(refused.ok()) << origin;
    EXPECT_EQ(refused.status().code(), 409);
    EXPECT_NE(refused.status().message().find("nobody (uid 65534) holds 3 slices, the most one user may hold "
                                              "(slices_per_user = 3"),
              std::string::npos)
        << refused.status().message();
  }
  EXPECT_FALSE(InLedger("n4"));
  EXPECT_EQ(registry_->counters().admission_refusals.load(), 2u);
  // Another user, root and an owner without a uid (made by an admin) are not held back by it.
  EXPECT_TRUE(Create("a1", "alice", 1000).ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(Create("r" + std::to_string(i), "root", 0).ok());
    EXPECT_TRUE(Create("t" + std::to_string(i), "ns-team", -1).ok());
  }
  // Once it deletes one, it may create one again.
  ASSERT_TRUE(registry_->DeleteSlice("n2").ok());
  EXPECT_TRUE(Create("n4", "nobody", kNobody).ok());
  EXPECT_FALSE(Create("n5", "nobody", kNobody).ok());
  // After a restart, the same.
  Open({.shares = {.per_user = 3}});
  EXPECT_FALSE(Create("n5", "nobody", kNobody).ok());
}

TEST_F(SliceTableTest, MembersOfTheAdminGroupAreAdmins) {
  passwd* daemon_user = getpwnam("daemon");
  ASSERT_NE(daemon_user, nullptr) << "this test needs the user 'daemon' (in the group of its uid)";
  const int64_t uid = daemon_user->pw_uid;
  group* primary = getgrgid(daemon_user->pw_gid);
  ASSERT_NE(primary, nullptr);
  const std::string admin_group = primary->gr_name;
  Open({.shares = {.per_user = 1}});
  ASSERT_TRUE(Create("d1", "daemon", uid).ok());
  EXPECT_FALSE(Create("d2", "daemon", uid).ok());
  Open({.shares = {.per_user = 1}, .admin_group = admin_group});
  EXPECT_TRUE(Create("d2", "daemon", uid).ok());
  // Others are not.
  EXPECT_TRUE(Create("n1", "nobody", kNobody).ok());
  EXPECT_FALSE(Create("n2", "nobody", kNobody).ok());
}

// An admin (as the API's caller) may make a slice for a user past that user's share and into
// the admins' reserve: the caller's word comes from the kernel or the token, never the body.
TEST_F(SliceTableTest, AnAdminCallerMakesSlicesForAUserPastItsShare) {
  Open({.shares = {.per_user = 1, .reserved_for_admins = 60}});
  ASSERT_TRUE(Create("n1", "nobody", kNobody).ok());
  EXPECT_FALSE(Create("n2", "nobody", kNobody).ok());
  EXPECT_TRUE(Create("n2", "nobody", kNobody, "api", /*by_admin=*/true).ok());
  EXPECT_FALSE(Create("n3", "nobody", kNobody).ok());
}

TEST_F(SliceTableTest, ASliceDeletedWhileItsProcessesRunCountsUntilTheyExit) {
  Open({.shares = {.per_user = 2}});
  ASSERT_TRUE(Create("a", "nobody", kNobody).ok());
  ASSERT_TRUE(Create("b", "nobody", kNobody).ok());
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  SliceHandle h = Attach(&app, "a");
  registry_->Sample();
  ASSERT_TRUE(registry_->DeleteSlice("a").ok());
  // Its entry is still taken: deleting slices that still run frees no share.
  for (int sample = 0; sample < 2; ++sample) {
    Result<Slice> refused = Create("c", "nobody", kNobody);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("holds 2 slices (1 of them deleted, their processes still running)"),
              std::string::npos)
        << refused.status().message();
    registry_->Sample();
  }
  app.Detach(h);
  registry_->Sample();
  EXPECT_TRUE(Create("c", "nobody", kNobody).ok());
}

TEST_F(SliceTableTest, SlicesFoundInTheLedgerAreAdoptedAllAndCount) {
  // Five entries taken without gsliced: four slices it adopts, and one whose name no slice of
  // its may have (never adopted, still taken).
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  std::vector<SliceHandle> running;
  for (const char* name : {"w1", "w2", "w3", "w4", "Not-A-Slice-Name"}) running.push_back(Attach(&app, name));
  Open({.shares = {.entries = 6, .per_user = 16, .reserved_for_admins = 2}});
  const NodeSnapshot snap = registry_->Snapshot();
  EXPECT_EQ(snap.slices.size(), 4u) << "running work must be adopted, whatever the table's shares";
  // One entry is free: the reserve's, for admins only.
  Result<Slice> refused = Create("n1", "nobody", kNobody);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has 1 of its 6 entries free, and the last 2 are kept for admins"),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(Create("r1", "root", 0, "run").ok());
  Result<Slice> full = Create("r2", "root", 0);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("the node's slice table is full"), std::string::npos)
      << full.status().message();
  for (const SliceHandle& h : running) app.Detach(h);
}

}  // namespace
}  // namespace gslice
