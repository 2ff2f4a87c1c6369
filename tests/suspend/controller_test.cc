#include "gslice/suspend/controller.h"

#include <gtest/gtest.h>

#include <map>

#include "fake_driver.h"

namespace gslice::suspend {
namespace {

using testing::FakeDriver;
constexpr uint64_t GiB = 1ULL << 30;
constexpr int64_t kSec = 1'000'000'000;
const std::string kGpu = "GPU-00000000-0000-0000-0000-00000000000a";

class ControllerTest : public ::testing::Test {
 protected:
  ControllerTest()
      : budget_({.reserve_bytes = 0}, [this] { return host_available_; }),
        mgr_(&driver_, &budget_, {}, nullptr, [](int) { return true; }),
        ctl_(&mgr_, {.resume_margin_bytes = 0, .preemption_quiet_ns = kSec}) {}

  ProcessSample& Add(int pid, uint64_t bytes, bool opportunistic, int64_t idle_timeout_ns = 0) {
    driver_.states[pid] = CU_PROCESS_STATE_RUNNING;
    ProcessSample s;
    s.info = {pid, "slice" + std::to_string(pid), kGpu, bytes, opportunistic};
    s.idle_timeout_ns = idle_timeout_ns;
    samples_[pid] = s;
    return samples_[pid];
  }
  TickReport Tick(int64_t now) {
    std::vector<ProcessSample> v;
    for (auto& [pid, s] : samples_) v.push_back(s);
    return ctl_.Tick(v, [this](const std::string&) { return gpu_free_; }, now);
  }
  State StateOf(int pid) { return mgr_.Get(pid)->state; }

  uint64_t host_available_ = 100 * GiB;
  uint64_t gpu_free_ = 0;
  std::map<int, ProcessSample> samples_;
  FakeDriver driver_;
  HostMemoryBudget budget_;
  SuspendManager mgr_;
  SuspendController ctl_;
};

TEST_F(ControllerTest, IdleProcessIsSuspendedAndResumedOnItsNextCall) {
  Add(1, 2 * GiB, false, 30 * kSec);
  Add(2, 2 * GiB, false, 0);  // no idle timeout: never reclaimed
  Tick(0);
  samples_[1].activity = 5;  // it works for a while
  Tick(20 * kSec);
  EXPECT_EQ(StateOf(1), State::kRunning);
  TickReport r = Tick(49 * kSec);  // 29 s since its last call
  EXPECT_TRUE(r.idle_suspended.empty());
  r = Tick(51 * kSec);
  ASSERT_EQ(r.idle_suspended.size(), 1u);
  EXPECT_EQ(StateOf(1), State::kSuspended);
  EXPECT_EQ(mgr_.Get(1)->cause, Cause::kIdle);
  EXPECT_EQ(StateOf(2), State::kRunning);
  // Still suspended while nobody calls.
  Tick(200 * kSec);
  EXPECT_EQ(StateOf(1), State::kSuspended);
  // The shim's gate caught a call.
  samples_[1].resume_requested = true;
  r = Tick(201 * kSec);
  ASSERT_EQ(r.resumed.size(), 1u);
  EXPECT_EQ(StateOf(1), State::kRunning);
  samples_[1].resume_requested = false;
  // A fresh idle period starts at the resume.
  Tick(220 * kSec);
  EXPECT_EQ(StateOf(1), State::kRunning);
}

TEST_F(ControllerTest, IdleSuspendThatHostMemoryCannotTakeIsQueued) {
  host_available_ = GiB;
  Add(1, 2 * GiB, false, kSec);
  Tick(0);
  TickReport r = Tick(2 * kSec);
  EXPECT_TRUE(r.idle_suspended.empty());
  ASSERT_EQ(r.queued.size(), 1u);
  EXPECT_NE(r.queued[0].find("host memory"), std::string::npos) << r.queued[0];
  EXPECT_EQ(StateOf(1), State::kRunning);
  host_available_ = 10 * GiB;  // memory came back: the queued suspend goes through
  r = Tick(3 * kSec);
  EXPECT_EQ(r.idle_suspended.size(), 1u);
}

TEST_F(ControllerTest, ManualSuspensionIgnoresCalls) {
  Add(1, GiB, false);
  Tick(0);
  ASSERT_TRUE(mgr_.Suspend(1, Cause::kManual).ok);
  samples_[1].resume_requested = true;
  Tick(kSec);
  EXPECT_EQ(StateOf(1), State::kSuspended);
}

TEST_F(ControllerTest, PreemptionSuspendsFewestBytesAndResumesWhenFree) {
  Add(1, 10 * GiB, true);
  Add(2, 3 * GiB, true);
  Add(3, 4 * GiB, true);
  Add(4, 30 * GiB, false);  // guaranteed: never a candidate
  Tick(0);
  PreemptResult p = ctl_.Preempt(kGpu, 8 * GiB, 2 * GiB, kSec);  // 6 GiB missing
  ASSERT_TRUE(p.ok) << p.reason;
  EXPECT_EQ(StateOf(2), State::kSuspended);
  EXPECT_EQ(StateOf(3), State::kSuspended);
  EXPECT_EQ(StateOf(1), State::kRunning);
  EXPECT_EQ(StateOf(4), State::kRunning);
  EXPECT_EQ(p.plan.moved_bytes, 7 * GiB);
  // Memory is still taken: nothing resumes.
  gpu_free_ = 2 * GiB;
  Tick(5 * kSec);
  EXPECT_EQ(StateOf(2), State::kSuspended);
  // 5 GiB free: one of them fits, not both.
  gpu_free_ = 5 * GiB;
  TickReport r = Tick(6 * kSec);
  EXPECT_EQ(r.resumed.size(), 1u);
  gpu_free_ = 20 * GiB;
  Tick(7 * kSec);
  EXPECT_EQ(StateOf(2), State::kRunning);
  EXPECT_EQ(StateOf(3), State::kRunning);
}

// The quiet period runs from when the requester is told its memory is free (HoldResumes),
// not from the preemption's start: a checkpoint longer than the period must not let the
// process resume under the requester's allocation before that allocation is made.
TEST_F(ControllerTest, PreemptedProcessWaitsOutTheQuietPeriodFromTheReply) {
  Add(1, 4 * GiB, true);
  Add(2, 30 * GiB, false);
  Tick(0);
  ASSERT_TRUE(ctl_.Preempt(kGpu, 4 * GiB, 0, kSec).ok);
  EXPECT_EQ(StateOf(1), State::kSuspended);
  ctl_.HoldResumes(kGpu, 6 * kSec);  // its checkpoint took 5 s
  ctl_.HoldResumes(kGpu, 2 * kSec);  // an earlier time never shortens the period
  gpu_free_ = 20 * GiB;              // the requester has not allocated yet
  Tick(6 * kSec + kSec / 2);         // 5.5 s after the preemption, 0.5 s after the reply
  EXPECT_EQ(StateOf(1), State::kSuspended);
  Tick(7 * kSec);
  EXPECT_EQ(StateOf(1), State::kRunning);
}

TEST_F(ControllerTest, PreemptionThatCannotFreeEnoughSaysWhy) {
  Add(1, 2 * GiB, true);
  Add(2, 30 * GiB, false);
  Tick(0);
  PreemptResult p = ctl_.Preempt(kGpu, 10 * GiB, GiB, kSec);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.reason.find("would free only 2 GiB"), std::string::npos) << p.reason;
  EXPECT_EQ(StateOf(1), State::kRunning);  // nothing suspended for nothing
}

TEST_F(ControllerTest, PreemptionBoundByHostMemory) {
  host_available_ = 4 * GiB;
  Add(1, 8 * GiB, true);
  Tick(0);
  PreemptResult p = ctl_.Preempt(kGpu, 8 * GiB, 0, kSec);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.reason.find("host memory"), std::string::npos) << p.reason;
  EXPECT_EQ(StateOf(1), State::kRunning);
}

TEST_F(ControllerTest, MoveChecksTypeAndRoom) {
  Add(1, 4 * GiB, false);
  Tick(0);
  GpuInfo from{kGpu, "NVIDIA H200", 0};
  GpuInfo other{"GPU-00000000-0000-0000-0000-00000000000b", "NVIDIA H200", 100 * GiB};
  Outcome o = ctl_.Move(1, from, other);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("suspend it first"), std::string::npos) << o.reason;
  ASSERT_TRUE(mgr_.Suspend(1, Cause::kMove).ok);
  GpuInfo small = other;
  small.free_bytes = GiB;
  o = ctl_.Move(1, from, small);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("stays suspended"), std::string::npos) << o.reason;
  GpuInfo h100 = other;
  h100.name = "NVIDIA H100 80GB HBM3";
  o = ctl_.Move(1, from, h100);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("same type"), std::string::npos) << o.reason;
  EXPECT_EQ(StateOf(1), State::kSuspended);
  o = ctl_.Move(1, from, other);
  ASSERT_TRUE(o.ok) << o.reason;
  EXPECT_EQ(mgr_.Get(1)->info.gpu_uuid, other.uuid);
  EXPECT_EQ(FormatGpuUuid(driver_.last_pairs.at(0).from), kGpu);
}

TEST(GpuUuid, ParsesAndFormats) {
  CUuuid u;
  ASSERT_TRUE(ParseGpuUuid("GPU-0123abcd-4567-89ef-0123-456789abcdef", &u));
  EXPECT_EQ(FormatGpuUuid(u), "GPU-0123abcd-4567-89ef-0123-456789abcdef");
  EXPECT_FALSE(ParseGpuUuid("GPU-0123", &u));
  EXPECT_FALSE(ParseGpuUuid("GPU-0123abcd-4567-89ef-0123-456789abcdeZ", &u));
}

}  // namespace
}  // namespace gslice::suspend
