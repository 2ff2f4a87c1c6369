// The opportunistic rate controller of time-sliced GPUs (time_sliced_controller.h), driven
// directly with synthetic periods on simulated time, and the speed judgements the controllers
// share (controller.h). The MPS controller's tests are in mps_controller_test.cc, the clocks'
// in progress_clock_test.cc and kernel_clock_test.cc.
#include <gtest/gtest.h>

#include <random>

#include "control_periods.h"
#include "controller.h"
#include "time_sliced_controller.h"

namespace gslice::compute {
namespace {

constexpr double kFloor = kProtectDefaultPermille / 1000.0;

// ---- speed judgements ------------------------------------------------------------------

TEST(ComputeSpeed, OverlapBoundsTheLossWithoutABaseline) {
  GuaranteedPeriod jobs[2] = {{500, 150'000'000, 3'000'000}, {20, 50'000'000, 1'000'000}};
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 0), 1 - 4e6 / 200e6);
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 1), 1 - 8e6 / 200e6) << "another opportunistic process counts as much";
  jobs[0].overlap_ns = 200'000'000;
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 0), 0);
  GuaranteedPeriod idle[1] = {{10, kMinJudgedBusyNs - 1, 0}};
  EXPECT_LT(OverlapSpeed(idle, 1, 0), 0) << "too little busy time to judge";
}

TEST(ComputeSpeed, TheStrictestFloorOfThePeersCounts) {
  EXPECT_DOUBLE_EQ(StrictestFloor(Busy({})), kFloor) << "no peer: the default";
  EXPECT_DOUBLE_EQ(StrictestFloor(Busy({Peer(1, 0, 900, 1), Peer(1, 0, 800, 2)})), 0.9);
  EXPECT_DOUBLE_EQ(StrictestFloor(Busy({Peer(1, 0, 900, 1), Peer(1, 0, 990, 2, 0)})), 0.99)
      << "an idle peer's floor binds too: it may be busy in the next period";
}

// ---- time-sliced -----------------------------------------------------------------------

// The step rule's moves without its waits (each step taken at once).
constexpr TimeSlicedTuning kNoWait{.hold_periods = 0, .backoff = false};

TEST(ComputeTimeSliced, AdditiveIncreaseWhileTheFloorHoldsHalvesBelowIt) {
  using L = OpportunisticLevel;
  EXPECT_EQ(NextOpportunisticLevel(L{0, 0}, 1.0, kFloor, kNoWait), (L{kRateStepPermille, 0}));
  EXPECT_EQ(NextOpportunisticLevel(L{200, 0}, 0.98, kFloor, kNoWait), (L{200 + kRateStepPermille, 0}));
  EXPECT_EQ(NextOpportunisticLevel(L{200, 0}, 0.96, kFloor, kNoWait), (L{100, 0}));
  EXPECT_EQ(NextOpportunisticLevel(L{15, 0}, 0.5, kFloor, kNoWait), (L{0, 0})) << "small rates go to zero";
  EXPECT_EQ(NextOpportunisticLevel(L{990, 0}, 1.0, kFloor, kNoWait), (L{1000, 0}));
  // Below the floor at rate 0: the gap level doubles from 1 ms up to kMaxGapNs; holding
  // again, it shrinks 1 ms per step before any rate is given back.
  L l{0, 0};
  std::vector<int64_t> gaps;
  for (int i = 0; i < 7; ++i) {
    l = NextOpportunisticLevel(l, 0.9, kFloor, kNoWait);
    gaps.push_back(l.gap_ns);
    EXPECT_EQ(l.rate_permille, 0u);
  }
  EXPECT_EQ(gaps, (std::vector<int64_t>{1'000'000, 2'000'000, 4'000'000, 8'000'000, 16'000'000, kMaxGapNs, kMaxGapNs}));
  EXPECT_EQ(NextOpportunisticLevel(L{0, 3'000'000}, 0.99, kFloor, kNoWait), (L{0, 2'000'000}));
  EXPECT_EQ(NextOpportunisticLevel(L{0, 500'000}, 0.99, kFloor, kNoWait), (L{0, 0}));
}

TEST(ComputeTimeSliced, StartsAtTheSafeEndOfABusyStretch) {
  TimeSlicedController c;
  ControlDecision d = c.Decide(Idle());
  EXPECT_TRUE(d.forget_budget) << "nothing to protect: time used now is not held against the rate";
  EXPECT_EQ(d.gap_ns, 0);
  d = c.Decide(Busy({Peer(1, 0)}));
  EXPECT_FALSE(d.forget_budget);
  EXPECT_EQ(d.rate_permille, 0u);
  EXPECT_EQ(d.gap_ns, TimeSlicedTuning{}.start_gap_ns);
  EXPECT_FALSE(d.probe_pause) << "no probes: the overlap needs no baseline";
  EXPECT_NE(Trace(d).find("controller: guaranteed work busy; rate 0 permille, gap 4000 us, floor 0.970"), std::string::npos)
      << Trace(d);
}

TEST(ComputeTimeSliced, NarrowsTheGapThenRaisesTheRateWhileTheJobHolds) {
  TimeSlicedController c;
  c.Decide(Busy({Peer(1, 0)}));
  const uint32_t hold = TimeSlicedTuning{}.hold_periods;
  // No overlap: the gap shrinks 1 ms per hold periods, then the rate grows by a step.
  std::vector<int64_t> gaps;
  std::vector<uint32_t> rates;
  for (uint32_t period = 1; period <= 6 * hold; ++period) {
    const ControlDecision d = c.Decide(Busy({Peer(1, 0)}));
    if (period % hold == 0) {
      gaps.push_back(d.gap_ns);
      rates.push_back(d.rate_permille);
    }
  }
  EXPECT_EQ(gaps, (std::vector<int64_t>{3'000'000, 2'000'000, 1'000'000, 0, 0, 0}));
  EXPECT_EQ(rates, (std::vector<uint32_t>{0, 0, 0, 0, kRateStepPermille, 2 * kRateStepPermille}));
  // Too little busy time says nothing: no step either way.
  const OpportunisticLevel before = c.level();
  for (int i = 0; i < 10; ++i) c.Decide(Busy({Peer(1, 0.5, kProtectDefaultPermille, 7, kMinJudgedBusyNs - 1)}));
  EXPECT_EQ(c.level(), before);
}

TEST(ComputeTimeSliced, BacksOffBelowTheFloorAndWaitsLongerAfterEachShortfall) {
  // A job that loses 5% whenever opportunistic work enters gaps under 1 ms or has a rate: the
  // first shortfall comes after four steps of hold periods each, then the wait doubles, up to
  // kMaxHoldPeriods: the controller settles where the job holds.
  TimeSlicedController c;
  const auto overlap_at = [](const OpportunisticLevel& l) { return l.rate_permille > 0 || l.gap_ns < 1'000'000 ? 0.05 : 0.0; };
  c.Decide(Busy({Peer(1, 0)}));
  std::vector<int> shortfalls;
  for (int period = 0; period < 400; ++period) {
    const double overlap = overlap_at(c.level());
    if (1 - overlap < kFloor) shortfalls.push_back(period);
    c.Decide(Busy({Peer(1 - overlap, overlap)}));
    EXPECT_LE(c.level().hold, kMaxHoldPeriods);
  }
  ASSERT_GE(shortfalls.size(), 3u);
  EXPECT_EQ(shortfalls[0], 16) << "four steps of 1 ms, each after 4 periods that held";
  EXPECT_EQ(shortfalls[1] - shortfalls[0], 9) << "then the wait doubles to 8 periods";
  EXPECT_EQ(shortfalls[2] - shortfalls[1], 17) << "and to the most, 16";
  EXPECT_LE(shortfalls.size(), 3u + (400u - 43u) / 17u + 1u) << "one shortfall per 17 periods from then on";
  EXPECT_EQ(c.level().rate_permille, 0u);
  // Idle guaranteed work: the next busy stretch starts from the safe end again.
  c.Decide(Idle());
  const ControlDecision d = c.Decide(Busy({Peer(1, 0)}));
  EXPECT_EQ(d.gap_ns, TimeSlicedTuning{}.start_gap_ns);
  EXPECT_EQ(c.level().hold, TimeSlicedTuning{}.hold_periods);
}

// A job that opportunistic work costs in proportion to its rate (loss = cost x rate), settled
// over many periods: the mean rate and the job's mean speed.
struct Settled {
  double rate = 0, speed = 0;
};
template <typename Controller, typename DecideFn>
Settled Settle(Controller& c, DecideFn decide, double cost, uint32_t floor_permille, int periods = 2000) {
  Settled s;
  uint32_t rate = 0;
  bool paused = false;
  for (int period = 0; period < periods; ++period) {
    const double x = paused ? 0 : rate / 1000.0;
    const double speed = 1 - cost * x;
    if (period >= periods / 2) {
      s.rate += x / (periods - periods / 2);
      s.speed += speed / (periods - periods / 2);
    }
    const ControlDecision d = decide(c, Busy({Peer(speed, x, floor_permille)}), period);
    rate = d.rate_permille;
    paused = d.probe_pause;
  }
  return s;
}

TEST(ComputeTimeSliced, ALowerFloorGivesOpportunisticWorkMore) {
  // Loss is at most the overlap here (cost 1): the overlap bound judges it exactly.
  const auto decide = [](TimeSlicedController& c, const ControlPeriod& p, int) { return c.Decide(p); };
  TimeSlicedController strict, loose;
  const Settled at97 = Settle(strict, decide, 1.0, 970);
  const Settled at90 = Settle(loose, decide, 1.0, 900);
  SCOPED_TRACE(testing::Message() << "rate " << at97.rate << " at 0.97, " << at90.rate << " at 0.90");
  EXPECT_GT(at90.rate, 2 * at97.rate);
  EXPECT_GE(at97.speed, 0.97 - 0.02);
  EXPECT_GE(at90.speed, 0.90 - 0.02);
  EXPECT_LT(at90.speed, 0.97) << "the job gives up what the lower floor allows";
}

TEST(ComputeTimeSliced, TheJobsOwnNoiseDoesNotMoveTheController) {
  // A job whose own speed moves by up to 20% from one period to the next (a busy host),
  // beside opportunistic work whose cost is the time both had work queued: 8% of the job's
  // busy time with gap 0, falling as the gap grows, plus the rate. The controller reads only
  // the overlap; the job's launches carry the noise.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noise(0.8, 1.2);
  const auto overlap_at = [](const OpportunisticLevel& l) {
    return 0.08 * std::exp(-static_cast<double>(l.gap_ns) / 10e6) + l.rate_permille / 1000.0;
  };
  TimeSlicedController c;
  c.Decide(Busy({Peer(1, 0)}));
  int shortfalls = 0;
  double gap_sum = 0;
  for (int period = 0; period < 400; ++period) {
    const double overlap = overlap_at(c.level());
    if (1 - overlap < kFloor) ++shortfalls;
    c.Decide(Busy({Peer((1 - overlap) * noise(rng), overlap)}));
    gap_sum += static_cast<double>(c.level().gap_ns) / 1e6;
  }
  // It settles where the cost holds (gap >= 10 ms: 8% x e^-1 < 3%), testing the next step
  // down now and then, each test waiting longer.
  EXPECT_LE(shortfalls, 3 + 400 / 17) << "at most one shortfall per longest wait once settled";
  EXPECT_GE(c.level().gap_ns, 9'000'000);
  EXPECT_LE(gap_sum / 400, 16.0);
}

}  // namespace
}  // namespace gslice::compute
