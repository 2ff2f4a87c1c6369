#include "gslice/suspend/manager.h"

#include <gtest/gtest.h>

#include <set>

#include "fake_driver.h"

namespace gslice::suspend {
namespace {

using testing::FakeDriver;
constexpr uint64_t GiB = 1ULL << 30;

struct Recorder : StateObserver {
  std::vector<std::pair<State, State>> changes;  // (previous, new)
  std::vector<std::string> forgotten;
  void OnStateChanged(const ProcessStatus& s, State prev) override { changes.emplace_back(prev, s.state); }
  void OnForgotten(int, const std::string& why) override { forgotten.push_back(why); }
};

class ManagerTest : public ::testing::Test {
 protected:
  ManagerTest()
      : budget_({.reserve_bytes = 0}, [this] { return available_; }),
        mgr_(&driver_, &budget_, {}, &rec_, [this](int pid) { return !dead_.count(pid); }) {}

  void Add(int pid, uint64_t bytes, const std::string& slice = "s") {
    driver_.states[pid] = CU_PROCESS_STATE_RUNNING;
    mgr_.Track({pid, slice, "GPU-00000000-0000-0000-0000-000000000001", bytes, true});
  }
  State StateOf(int pid) { return mgr_.Get(pid)->state; }

  uint64_t available_ = 100 * GiB;
  std::set<int> dead_;
  FakeDriver driver_;
  Recorder rec_;
  HostMemoryBudget budget_;
  SuspendManager mgr_;
};

TEST_F(ManagerTest, SuspendAndResumeWalkTheStates) {
  Add(10, 4 * GiB);
  Outcome s = mgr_.Suspend(10, Cause::kManual);
  ASSERT_TRUE(s.ok) << s.reason;
  EXPECT_EQ(s.state, State::kSuspended);
  EXPECT_EQ(driver_.states[10], CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(budget_.held_bytes(), 4 * GiB);
  EXPECT_EQ(mgr_.Get(10)->host_bytes, 4 * GiB);
  Outcome r = mgr_.Resume(10);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(StateOf(10), State::kRunning);
  EXPECT_EQ(driver_.states[10], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(budget_.held_bytes(), 0u);
  std::vector<std::pair<State, State>> want = {{State::kRunning, State::kSuspending},
                                               {State::kSuspending, State::kSuspended},
                                               {State::kSuspended, State::kResuming},
                                               {State::kResuming, State::kRunning}};
  EXPECT_EQ(rec_.changes, want);
  EXPECT_EQ(mgr_.Get(10)->suspends, 1u);
  EXPECT_EQ(mgr_.Get(10)->resumes, 1u);
}

TEST_F(ManagerTest, RepeatedRequestsAreIdempotent) {
  Add(10, GiB);
  ASSERT_TRUE(mgr_.Suspend(10, Cause::kManual).ok);
  EXPECT_TRUE(mgr_.Suspend(10, Cause::kManual).ok);
  EXPECT_EQ(driver_.Count("checkpoint"), 1);
  ASSERT_TRUE(mgr_.Resume(10).ok);
  EXPECT_TRUE(mgr_.Resume(10).ok);
  EXPECT_EQ(driver_.Count("restore"), 1);
}

TEST_F(ManagerTest, UnknownProcessIsRefusedWithAReason) {
  Outcome o = mgr_.Suspend(999, Cause::kManual);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("999"), std::string::npos);
  EXPECT_TRUE(driver_.calls.empty());
}

TEST_F(ManagerTest, HostMemoryRefusalTouchesNothing) {
  available_ = 3 * GiB;
  Add(10, 4 * GiB);
  Outcome o = mgr_.Suspend(10, Cause::kManual);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("host memory"), std::string::npos) << o.reason;
  EXPECT_EQ(StateOf(10), State::kRunning);
  EXPECT_EQ(mgr_.Get(10)->reason, o.reason);
  EXPECT_TRUE(driver_.calls.empty());
  EXPECT_EQ(budget_.in_flight_bytes(), 0u);
}

TEST_F(ManagerTest, LockTimeoutKeepsTheProcessRunning) {
  Add(10, GiB);
  driver_.fail_once["lock"] = CUDA_ERROR_NOT_READY;
  Outcome o = mgr_.Suspend(10, Cause::kIdle);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.state, State::kRunning);
  EXPECT_NE(o.reason.find("timed out"), std::string::npos) << o.reason;
  EXPECT_NE(o.reason.find("keeps running"), std::string::npos) << o.reason;
  EXPECT_EQ(driver_.states[10], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(budget_.in_flight_bytes(), 0u);
  // It can be suspended later.
  EXPECT_TRUE(mgr_.Suspend(10, Cause::kIdle).ok);
}

TEST_F(ManagerTest, UnsupportedDriverKeepsTheProcessRunning) {
  Add(10, GiB);
  driver_.fail_always["lock"] = CUDA_ERROR_NOT_SUPPORTED;
  Outcome o = mgr_.Suspend(10, Cause::kManual);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(StateOf(10), State::kRunning);
  EXPECT_NE(o.reason.find("cannot checkpoint"), std::string::npos) << o.reason;
}

TEST_F(ManagerTest, FailedCheckpointUnlocksAndKeepsRunning) {
  Add(10, GiB);
  driver_.fail_once["checkpoint"] = CUDA_ERROR_OUT_OF_MEMORY;
  driver_.state_after_failure["checkpoint"] = CU_PROCESS_STATE_LOCKED;
  Outcome o = mgr_.Suspend(10, Cause::kManual);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.state, State::kRunning);
  EXPECT_EQ(driver_.states[10], CU_PROCESS_STATE_RUNNING);  // unlocked again
  EXPECT_NE(o.reason.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << o.reason;
  EXPECT_EQ(budget_.in_flight_bytes(), 0u);
  EXPECT_EQ(budget_.held_bytes(), 0u);
}

TEST_F(ManagerTest, CheckpointLeavingDriverFailedIsReportedFailed) {
  Add(10, GiB);
  driver_.fail_once["checkpoint"] = CUDA_ERROR_UNKNOWN;
  driver_.state_after_failure["checkpoint"] = CU_PROCESS_STATE_FAILED;
  Outcome o = mgr_.Suspend(10, Cause::kManual);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(StateOf(10), State::kFailed);
  EXPECT_NE(o.reason.find("FAILED"), std::string::npos) << o.reason;
  EXPECT_EQ(mgr_.Get(10)->failures, 1u);
}

TEST_F(ManagerTest, FailedRestoreStaysSuspendedAndResumable) {
  Add(10, 2 * GiB);
  ASSERT_TRUE(mgr_.Suspend(10, Cause::kManual).ok);
  driver_.fail_once["restore"] = CUDA_ERROR_OUT_OF_MEMORY;
  Outcome o = mgr_.Resume(10);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.state, State::kSuspended);
  EXPECT_NE(o.reason.find("stays suspended"), std::string::npos) << o.reason;
  EXPECT_EQ(budget_.held_bytes(), 2 * GiB);  // still on the host
  Outcome again = mgr_.Resume(10);
  EXPECT_TRUE(again.ok) << again.reason;
  EXPECT_EQ(driver_.states[10], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(budget_.held_bytes(), 0u);
}

TEST_F(ManagerTest, ProcessExitingWhileSuspendedReleasesItsMemory) {
  Add(10, 3 * GiB);
  ASSERT_TRUE(mgr_.Suspend(10, Cause::kManual).ok);
  dead_.insert(10);
  std::vector<int> gone = mgr_.ReapExited();
  EXPECT_EQ(gone, std::vector<int>{10});
  EXPECT_FALSE(mgr_.Get(10).has_value());
  EXPECT_EQ(budget_.held_bytes(), 0u);
  ASSERT_EQ(rec_.forgotten.size(), 1u);
  EXPECT_NE(rec_.forgotten[0].find("while suspended"), std::string::npos);
}

TEST_F(ManagerTest, ProcessExitingDuringResumeIsForgotten) {
  Add(10, GiB);
  ASSERT_TRUE(mgr_.Suspend(10, Cause::kManual).ok);
  dead_.insert(10);
  driver_.states.erase(10);  // the driver no longer knows the pid
  Outcome o = mgr_.Resume(10);
  EXPECT_FALSE(o.ok);
  EXPECT_TRUE(o.exited);
  EXPECT_FALSE(mgr_.Get(10).has_value());
  EXPECT_EQ(budget_.held_bytes(), 0u);
}

TEST_F(ManagerTest, AdoptAfterRestartFollowsTheDriver) {
  // A fresh manager (a restarted daemon) meets processes in every driver state.
  driver_.states = {{1, CU_PROCESS_STATE_RUNNING},
                    {2, CU_PROCESS_STATE_CHECKPOINTED},
                    {3, CU_PROCESS_STATE_LOCKED},
                    {4, CU_PROCESS_STATE_FAILED}};
  for (int pid = 1; pid <= 4; ++pid) mgr_.Adopt({pid, "s", "", 5 * GiB, true});
  EXPECT_EQ(StateOf(1), State::kRunning);
  EXPECT_EQ(StateOf(2), State::kSuspended);
  EXPECT_EQ(StateOf(3), State::kRunning);  // interrupted suspend/resume: unlocked
  EXPECT_EQ(driver_.states[3], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(StateOf(4), State::kFailed);
  EXPECT_EQ(budget_.held_bytes(), 5 * GiB);  // the adopted checkpoint
  // The adopted suspended process resumes normally.
  EXPECT_TRUE(mgr_.Resume(2).ok);
  EXPECT_EQ(budget_.held_bytes(), 0u);
}

TEST_F(ManagerTest, MoveRestoresThroughGpuPairs) {
  Add(10, GiB);
  ASSERT_TRUE(mgr_.Suspend(10, Cause::kMove).ok);
  GpuPair p;
  ASSERT_TRUE(ParseGpuUuid("GPU-00000000-0000-0000-0000-000000000001", &p.from));
  ASSERT_TRUE(ParseGpuUuid("GPU-00000000-0000-0000-0000-000000000002", &p.to));
  const GpuPair pairs[] = {p};
  Outcome o = mgr_.Resume(10, pairs, "GPU-00000000-0000-0000-0000-000000000002");
  ASSERT_TRUE(o.ok) << o.reason;
  ASSERT_EQ(driver_.last_pairs.size(), 1u);
  EXPECT_EQ(FormatGpuUuid(driver_.last_pairs[0].to), "GPU-00000000-0000-0000-0000-000000000002");
  EXPECT_EQ(mgr_.Get(10)->info.gpu_uuid, "GPU-00000000-0000-0000-0000-000000000002");
}

TEST_F(ManagerTest, SliceSuspendRollsBackOnFailure) {
  Add(1, GiB, "nb");
  Add(2, GiB, "nb");
  Add(3, GiB, "other");
  // Process 1 suspends, 2's lock is refused (the driver holds it FAILED): 1 is resumed.
  driver_.states[2] = CU_PROCESS_STATE_FAILED;
  std::vector<Outcome> outs = mgr_.SuspendSlice("nb", Cause::kManual);
  EXPECT_EQ(StateOf(1), State::kRunning);
  EXPECT_EQ(StateOf(2), State::kRunning);
  EXPECT_EQ(StateOf(3), State::kRunning);
  EXPECT_EQ(mgr_.SliceState("nb"), State::kRunning);
  ASSERT_GE(outs.size(), 3u);
  EXPECT_FALSE(outs[1].ok);
  EXPECT_NE(outs.back().reason.find("rolled back"), std::string::npos);
  // With both healthy, the whole slice suspends and resumes.
  driver_.states[2] = CU_PROCESS_STATE_RUNNING;
  outs = mgr_.SuspendSlice("nb", Cause::kManual);
  EXPECT_EQ(mgr_.SliceState("nb"), State::kSuspended);
  EXPECT_EQ(StateOf(3), State::kRunning);
  outs = mgr_.ResumeSlice("nb");
  EXPECT_EQ(mgr_.SliceState("nb"), State::kRunning);
}

}  // namespace
}  // namespace gslice::suspend
