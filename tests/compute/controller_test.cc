// The opportunistic rate controllers the launch gate runs (time_sliced_controller.h,
// mps_controller.h), driven directly with synthetic periods on simulated time, and the speed
// judgements they share (controller.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "controller.h"
#include "mps_controller.h"
#include "time_sliced_controller.h"

namespace gslice::compute {
namespace {

constexpr double kFloor = kProtectDefaultPermille / 1000.0;
constexpr int64_t kBusyNs = 200'000'000;  // a busy guaranteed job's busy time per period

// One guaranteed peer's period: busy for busy_ns, at speed (of its solo speed, launches per
// busy ns kPerNs alone), with this process's work queued beside it for overlap of its busy time.
constexpr double kPerNs = 1e-4;
PeerPeriod Peer(double speed, double overlap, uint32_t floor_permille = kProtectDefaultPermille, int id = 7,
                int64_t busy_ns = kBusyNs) {
  return {.id = id,
          .owner = 1000u + static_cast<uint64_t>(id),
          .launches = static_cast<uint64_t>(std::llround(speed * kPerNs * static_cast<double>(busy_ns))),
          .busy_ns = busy_ns,
          .overlap_ns = static_cast<int64_t>(overlap * static_cast<double>(busy_ns)),
          .floor_permille = floor_permille};
}
ControlPeriod Busy(std::vector<PeerPeriod> peers, int opportunistic_peers = 0) {
  ControlPeriod p;
  p.guaranteed_busy = true;
  p.opportunistic_peers = opportunistic_peers;
  for (const PeerPeriod& x : peers) p.peers[p.count++] = x;
  return p;
}
ControlPeriod Idle() { return ControlPeriod{}; }
std::string Trace(const ControlDecision& d) { return std::string(d.trace[0]) + "\n" + d.trace[1]; }

// ---- speed judgements ------------------------------------------------------------------

TEST(ComputeSpeed, JudgesSpeedWhileBusyNotLaunchRate) {
  // Two jobs: one at 10 launches per busy ms, one at 1. Their time at baseline speed over
  // the time they took.
  GuaranteedPeriod jobs[3] = {{1000, 100'000'000, 1e-5}, {50, 50'000'000, 1e-6}, {7, 30'000'000, 0}};
  EXPECT_DOUBLE_EQ(GuaranteedSpeed(jobs, 3), 1.0) << "the job with no baseline is left out";
  jobs[0].busy_ns = 125'000'000;  // the first job needed 25% longer for its launches
  EXPECT_DOUBLE_EQ(GuaranteedSpeed(jobs, 3), 150e6 / 175e6);
  GuaranteedPeriod idle[1] = {{10, kMinJudgedBusyNs - 1, 1e-5}};
  EXPECT_LT(GuaranteedSpeed(idle, 1), 0) << "too little busy time to judge";
  idle[0].busy_ns = kMinJudgedBusyNs;
  EXPECT_DOUBLE_EQ(GuaranteedSpeed(idle, 1), 10 / (1e-5 * kMinJudgedBusyNs));
}

TEST(ComputeSpeed, OverlapBoundsTheLossWithoutABaseline) {
  GuaranteedPeriod jobs[2] = {{500, 150'000'000, 0, 3'000'000}, {20, 50'000'000, 0, 1'000'000}};
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 0), 1 - 4e6 / 200e6);
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 1), 1 - 8e6 / 200e6) << "another opportunistic process counts as much";
  jobs[0].overlap_ns = 200'000'000;
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 0), 0);
  GuaranteedPeriod idle[1] = {{10, kMinJudgedBusyNs - 1, 0, 0}};
  EXPECT_LT(OverlapSpeed(idle, 1, 0), 0) << "too little busy time to judge";
}

TEST(ComputeSpeed, OnMpsAReadingTheOverlapCannotExplainIsNoise) {
  // 1000 launches in 200 ms of busy time against a baseline of 1000 per 160 ms: 0.8.
  constexpr double kBase = 1000 / 160e6;
  GuaranteedPeriod job{1000, 200'000'000, kBase, 0};
  EXPECT_DOUBLE_EQ(GuaranteedSpeed(&job, 1), 0.8);
  EXPECT_DOUBLE_EQ(SpatialSpeed(&job, 1, 0), 1.0) << "no opportunistic work queued: it cost nothing";
  job.overlap_ns = 20'000'000;
  EXPECT_DOUBLE_EQ(SpatialSpeed(&job, 1, 0), 0.9) << "queued for 10% of the busy time: at most 10% lost";
  EXPECT_DOUBLE_EQ(SpatialSpeed(&job, 1, 1), 0.8) << "another opportunistic process counts as much";
  job.overlap_ns = 150'000'000;
  EXPECT_DOUBLE_EQ(SpatialSpeed(&job, 1, 0), 0.8) << "the overlap explains the loss: the reading stands";
  // Jobs without a baseline are left out of both, as in GuaranteedSpeed.
  GuaranteedPeriod two[2] = {{1000, 200'000'000, kBase, 0}, {50, 100'000'000, 0, 100'000'000}};
  EXPECT_DOUBLE_EQ(SpatialSpeed(two, 2, 0), 1.0);
  two[0].base_per_ns = 0;
  EXPECT_LT(SpatialSpeed(two, 2, 0), 0) << "no job with a baseline: nothing to judge";
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

// ---- MPS -------------------------------------------------------------------------------

constexpr MpsTuning kMps{};
constexpr int kProbeEveryPeriods = static_cast<int>(kMps.probe_every_ns / kControlPeriodNs);

// Drives an MpsController on simulated time, one period per call.
struct MpsClock {
  MpsController c;
  int64_t now = 0;
  ControlDecision Step(const ControlPeriod& p) {
    now += kControlPeriodNs;
    return c.Decide(p, now);
  }
};

TEST(ComputeMps, ProbesFirstThenRunsFree) {
  MpsClock m;
  ControlDecision d = m.Step(Busy({Peer(1, 0)}));
  EXPECT_TRUE(d.probe_pause) << "a busy stretch starts with a probe";
  EXPECT_EQ(d.rate_permille, 0u);
  d = m.Step(Busy({Peer(1, 0)}));
  EXPECT_TRUE(d.probe_pause);
  d = m.Step(Busy({Peer(1, 0)}));
  EXPECT_FALSE(d.probe_pause) << "the probe lasts probe_periods";
  EXPECT_EQ(d.rate_permille, kMps.start_permille);
  EXPECT_NE(Trace(d).find("probe measured 1 guaranteed job(s) alone; back to rate 1000 permille"), std::string::npos) << Trace(d);
  // Idle guaranteed work: no limit, budget forgotten; busy again: probed again first.
  d = m.Step(Idle());
  EXPECT_TRUE(d.forget_budget);
  EXPECT_FALSE(d.probe_pause);
  EXPECT_TRUE(m.Step(Busy({Peer(1, 0)})).probe_pause);
}

TEST(ComputeMps, ProbesOnScheduleAndAJobWithNoBaselineSoon) {
  MpsClock m;
  std::vector<int> probes;
  bool was = false;
  for (int period = 0; period < 4 * kProbeEveryPeriods; ++period) {
    const ControlDecision d = m.Step(Busy({Peer(1, 0)}));
    if (d.probe_pause && !was) probes.push_back(period);
    was = d.probe_pause;
  }
  ASSERT_GE(probes.size(), 4u);
  for (size_t i = 1; i < probes.size(); ++i) EXPECT_EQ(probes[i] - probes[i - 1], kProbeEveryPeriods) << i;
  // A second job appears, busy: it has no baseline, so it is probed within kUnknownJobProbeNs,
  // not at the next regular probe.
  int until = -1;
  for (int period = 0; period < kProbeEveryPeriods && until < 0; ++period) {
    if (m.Step(Busy({Peer(1, 0), Peer(1, 0, kProtectDefaultPermille, 9)})).probe_pause) until = period;
  }
  ASSERT_GE(until, 0);
  EXPECT_LE(until, static_cast<int>(kUnknownJobProbeNs / kControlPeriodNs) + 1);
}

// A host for the MPS controller: one busy guaranteed job that opportunistic work at exposure x
// (its rate, the share of the job's busy time it has work queued) costs cost * x, and whose
// readings carry a log-normal drift (5% spread, correlation halving in about 1.2 s), 6% of
// white noise per period and, one period in twenty, a stall to 0.4 of its speed. Returns the
// job's mean true speed and the mean rate over the second half of `periods`.
Settled RunMpsHost(double cost, unsigned seed, uint32_t floor_permille = kProtectDefaultPermille, int periods = 2400) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> drift(0, 0.05 * std::sqrt(1 - 0.87 * 0.87)), white(0, 0.06);
  std::uniform_int_distribution<int> stalls(0, 19);
  MpsClock m;
  double host = 0;
  uint32_t rate = 0;
  bool paused = false;
  Settled s;
  for (int period = 0; period < periods; ++period) {
    host = 0.87 * host + drift(rng);
    const double x = paused ? 0 : rate / 1000.0;
    const double truth = 1 - cost * x;
    const double reading = std::exp(host) * truth * (1 + white(rng)) * (stalls(rng) == 0 ? 0.4 : 1.0);
    if (period >= periods / 2) {
      s.rate += x / (periods - periods / 2);
      s.speed += truth / (periods - periods / 2);
    }
    const ControlDecision d = m.Step(Busy({Peer(reading, x, floor_permille)}));
    rate = d.rate_permille;
    paused = d.probe_pause;
  }
  return s;
}

TEST(ComputeMps, PairedProbesTellTheCostFromTheHostsDrift) {
  // Averaged over eight hosts. Harmless work keeps most of its rate (the probes take 8%); work
  // that costs the job up to 60% at the full rate is held where the job keeps its floor, give
  // or take the estimate's spread.
  for (double cost : {0.0, 0.02, 0.05, 0.10, 0.30, 0.60}) {
    Settled avg;
    for (unsigned seed = 1; seed <= 8; ++seed) {
      const Settled s = RunMpsHost(cost, seed);
      avg.speed += s.speed / 8;
      avg.rate += s.rate / 8;
    }
    SCOPED_TRACE(testing::Message() << "loss at the full rate " << cost << ": speed " << avg.speed << ", rate " << avg.rate);
    EXPECT_GE(avg.speed, kFloor - 0.01);
    if (cost <= 0.02) {
      EXPECT_GE(avg.rate, 0.6) << "the drift and the stalls alone must not cost harmless work its rate";
    } else {
      EXPECT_GE(avg.rate, 0.5 * (1 - kFloor) / cost) << "nor hold it far below what the floor allows";
    }
  }
}

TEST(ComputeMps, ALowerFloorGivesOpportunisticWorkMore) {
  for (double cost : {0.10, 0.30}) {
    Settled at97, at90;
    for (unsigned seed = 1; seed <= 8; ++seed) {
      const Settled a = RunMpsHost(cost, seed, 970), b = RunMpsHost(cost, seed, 900);
      at97.rate += a.rate / 8;
      at97.speed += a.speed / 8;
      at90.rate += b.rate / 8;
      at90.speed += b.speed / 8;
    }
    SCOPED_TRACE(testing::Message() << "cost " << cost << ": rate " << at97.rate << " at 0.97, " << at90.rate << " at 0.90; speed "
                                    << at97.speed << ", " << at90.speed);
    EXPECT_GT(at90.rate, 1.5 * at97.rate);
    EXPECT_GE(at90.speed, 0.90 - 0.01);
    EXPECT_LT(at90.speed, at97.speed);
  }
}

TEST(ComputeMps, ALargeLossCutsAtOnceAndBringsTheProbeForward) {
  MpsClock m;
  // Learn a harmless job: probe, then free.
  ControlDecision d;
  for (int period = 0; period < 8; ++period) d = m.Step(Busy({Peer(1, 1)}));
  ASSERT_FALSE(d.probe_pause);
  const uint32_t before = d.rate_permille;
  ASSERT_GT(before, 500u);
  // The job now loses half its speed beside the work: two periods in a row under
  // kSpatialCutBelow cut the rate to a quarter.
  for (int period = 0; period < 2; ++period) d = m.Step(Busy({Peer(0.5, 1)}));
  EXPECT_EQ(d.rate_permille, SpatialCut(before)) << Trace(d);
  EXPECT_NE(Trace(d).find("cut: guaranteed speed at most 0.500"), std::string::npos) << Trace(d);
  // ... and the next probe comes reprobe_after_cut_ns after the cut, not probe_every_ns after
  // the last probe, to measure what the work costs now.
  int until = -1;
  for (int period = 1; period < kProbeEveryPeriods && until < 0; ++period) {
    if (m.Step(Busy({Peer(1, 0)})).probe_pause) until = period;
  }
  EXPECT_EQ(until, static_cast<int>(kMps.reprobe_after_cut_ns / kControlPeriodNs));
}

TEST(ComputeMps, APairThatReadsTheProbeStaleProbesAgain) {
  // The job warms up through the first probe (a third of its speed), then runs at full speed:
  // the pair reads it 3x faster than the probe, which is no sample of the loss.
  MpsClock m;
  for (int period = 0; period < 1 + static_cast<int>(kMps.probe_periods) - 1; ++period) m.Step(Busy({Peer(0.3, 0)}));
  ControlDecision d = m.Step(Busy({Peer(0.3, 0)}));  // the probe ends
  ASSERT_FALSE(d.probe_pause);
  d = m.Step(Busy({Peer(1, 1)}));
  d = m.Step(Busy({Peer(1, 1)}));  // the pair's second half ends
  EXPECT_NE(Trace(d).find("the probe's baseline is stale; probing again"), std::string::npos) << Trace(d);
  EXPECT_EQ(m.c.loss().count(), 0) << "the pair is no sample";
  EXPECT_TRUE(m.Step(Busy({Peer(1, 1)})).probe_pause) << "probed again at once";
}

TEST(ComputeMps, TheLossEstimateSetsTheRate) {
  // A job that loses 6% at full exposure: the pair samples 0.06 per exposure, and the rate
  // becomes the exposure that costs the floor's 3%: half.
  MpsClock m;
  ControlDecision d;
  for (int period = 0; period < 3; ++period) d = m.Step(Busy({Peer(1, 0)}));  // probe
  ASSERT_EQ(d.rate_permille, 1000u);
  for (int period = 0; period < 2; ++period) d = m.Step(Busy({Peer(0.94, 1)}));  // pair
  EXPECT_NEAR(m.c.loss().PerExposure(), 0.06, 0.002);
  EXPECT_EQ(d.rate_permille, std::max(kExplorePermille, RateForLoss(m.c.loss().PerExposure(), 0, kFloor)));
  EXPECT_NE(Trace(d).find("(sampled, 0 pooled)"), std::string::npos) << Trace(d);
}

TEST(ComputeMps, TheCostIsTheMedianLossPerExposure) {
  LossEstimate e;
  EXPECT_LT(e.PerExposure(), 0) << "nothing known";
  EXPECT_EQ(RateForLoss(e.PerExposure(), 0, kFloor), 1000u) << "nothing known: no limit";
  EXPECT_FALSE(e.Add(0.5, kMinExposure / 2)) << "too little exposure to tell";
  EXPECT_EQ(e.count(), 0);
  // The median of loss over exposure: 0.04, 0.06 and 0.05.
  EXPECT_TRUE(e.Add(0.02, 0.5));
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.04);
  EXPECT_TRUE(e.Add(0.06, 1.0));
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.05) << "two samples: the middle of both";
  EXPECT_TRUE(e.Add(0.04, 0.8));
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.05);
  // A probe that caught the job in a slow moment reads it 3.5x faster in the pair: one such
  // sample moves the median by one place, not the estimate to 0.
  EXPECT_TRUE(e.Add(1 - 3.5, 0.88));
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.045);
  e.DropNewest();
  EXPECT_EQ(e.count(), 3);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.05);
  // Only the newest kLossSamples count.
  for (int i = 0; i < kLossSamples; ++i) e.Add(0.1, 1.0);
  e.Add(0.9, 1.0);
  e.DropNewest();
  EXPECT_EQ(e.count(), kLossSamples - 1);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.1);
  for (int i = 0; i < 4; ++i) e.Add(0.02, 1.0);
  EXPECT_EQ(e.count(), kLossSamples);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.06) << "four samples of 0.1 left and four of 0.02: the middle";
  // The rate whose exposure costs the floor's share: at 6% per exposure, half at 0.97; the
  // other opportunistic process takes as much.
  EXPECT_EQ(RateForLoss(0.06, 0, kFloor), 500u);
  EXPECT_EQ(RateForLoss(0.06, 1, kFloor), 250u);
  // A lower floor allows more: at 0.90, work costing 20% per exposure gets half.
  EXPECT_NEAR(RateForLoss(0.2, 0, 0.90), 500u, 1);
  EXPECT_EQ(RateForLoss(0.06, 0, 0.90), 1000u);
  // A job faster beside the work lost nothing.
  for (int i = 0; i < kLossSamples; ++i) e.Add(-0.02, 1.0);
  EXPECT_EQ(e.PerExposure(), 0);
  e.Clear();
  EXPECT_LT(e.PerExposure(), 0);
  // After a pair: the estimate's rate where the pair was sampled; otherwise only growing
  // towards it (step and a quarter), or down to it at once.
  for (int i = 0; i < kTrustedSamples; ++i) e.Add(0.06, 1.0);
  EXPECT_EQ(NextSpatialRate(900, e, true, 0, kFloor, kMps.step_permille), 500u);
  EXPECT_EQ(NextSpatialRate(100, e, true, 0, kFloor, kMps.step_permille), 500u);
  EXPECT_EQ(NextSpatialRate(100, e, false, 0, kFloor, kMps.step_permille), 100u + kMps.step_permille + 25);
  EXPECT_EQ(NextSpatialRate(480, e, false, 0, kFloor, kMps.step_permille), 500u);
  EXPECT_EQ(NextSpatialRate(900, e, false, 0, kFloor, kMps.step_permille), 500u);
  EXPECT_EQ(SpatialCut(1000), 250u);
  EXPECT_EQ(SpatialCut(30), 0u);
}

TEST(ComputeMps, FewSamplesExploreAndSmallOnesPool) {
  // While the estimate has fewer than kTrustedSamples samples, the rate is at least
  // kExplorePermille, shared with the other opportunistic processes.
  LossEstimate f;
  EXPECT_EQ(EstimateRate(f, 0, kFloor), 1000u) << "nothing known: no limit";
  EXPECT_TRUE(f.Add(0.5, 0.8));  // 0.625 per exposure: RateForLoss gives 48
  EXPECT_EQ(RateForLoss(f.PerExposure(), 0, kFloor), 48u);
  EXPECT_EQ(EstimateRate(f, 0, kFloor), kExplorePermille);
  EXPECT_EQ(EstimateRate(f, 1, kFloor), kExplorePermille / 2);
  EXPECT_TRUE(f.Add(0.5, 0.8));
  EXPECT_TRUE(f.Add(0.5, 0.8));
  EXPECT_EQ(EstimateRate(f, 0, kFloor), 48u) << "three samples: the estimate decides alone";
  // The pool: pairs under kMinExposure make one sample once n of them at mean exposure x
  // have n x^2 >= kMinExposure^2; idle opportunistic work (no exposure) adds nothing.
  LossEstimate e;
  EXPECT_TRUE(e.Add(0.2, 1.0));
  EXPECT_FALSE(e.Add(0.01, 0.05));
  EXPECT_FALSE(e.Add(0.5, 0.0)) << "idle opportunistic work";
  EXPECT_FALSE(e.Add(0.0, 0.05));
  EXPECT_FALSE(e.Add(0.01, 0.05));
  EXPECT_EQ(e.count(), 1);
  EXPECT_TRUE(e.Add(0.0, 0.05)) << "four pairs at 0.05 tell as much as one at 0.1";
  EXPECT_EQ(e.count(), 2);
  EXPECT_DOUBLE_EQ(e.PerExposure(), (0.2 + 0.1) / 2);
  EXPECT_FALSE(e.Add(0.01, 0.05));
  EXPECT_TRUE(e.Add(0.3, 1.0)) << "a pair of enough exposure supersedes the pool";
  EXPECT_EQ(e.pooled(), 0);
  e.Clear();
  EXPECT_EQ(e.count(), 0);
}

}  // namespace
}  // namespace gslice::compute
