// The opportunistic rate controllers the launch gate runs (time_sliced_controller.h,
// mps_controller.h), driven directly with synthetic periods on simulated time, the speed
// judgements they share (controller.h), and the kernel speed the MPS controller judges
// (kernel_clock.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "controller.h"
#include "kernel_clock.h"
#include "mps_controller.h"
#include "progress_clock.h"
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
  p.wanted = true;
  for (const PeerPeriod& x : peers) p.peers[p.count++] = x;
  return p;
}
ControlPeriod Idle() { return ControlPeriod{}; }
std::string Trace(const ControlDecision& d) { return std::string(d.trace[0]) + "\n" + d.trace[1]; }

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

// ---- kernel speed (kernel_clock.h) ------------------------------------------------------

// A job's launches, pass by pass (200 us apart) over ms: launches_per_pass in every pass that
// moves, and moving in `moving` of every 10 passes. Returns the time after.
int64_t FeedProgress(ProgressClock& p, int64_t now, uint64_t* launches, double ms, bool beside,
                     double launches_per_pass, int moving = 10) {
  const int passes = static_cast<int>(ms * 5);
  double carry = 0;
  for (int i = 0; i < passes; ++i) {
    now += 200'000;
    if (i % 10 < moving) {
      carry += launches_per_pass;
      *launches += static_cast<uint64_t>(carry);
      carry -= static_cast<uint64_t>(carry);
    }
    p.Pass(now, *launches, beside);
  }
  return now;
}

// Passes of 200 us for ms: in `moving` of every 10 the job launches, in the next `waiting` its
// host waits on the GPU the whole pass (the waits counter grows by 200 us), in the rest it
// idles.
int64_t FeedWaits(ProgressClock& p, int64_t now, uint64_t* launches, int64_t* waited, double ms, bool beside,
                  int moving, int waiting) {
  const int passes = static_cast<int>(ms * 5);
  for (int i = 0; i < passes; ++i) {
    now += 200'000;
    if (i % 10 < moving) {
      *launches += 4;
    } else if (i % 10 < moving + waiting) {
      *waited += 200'000;
    }
    p.Pass(now, *launches, beside, *waited);
  }
  return now;
}

// A training loop whose host launches in 90% of its time alone and waits on the GPU the rest,
// and beside opportunistic work waits 40% of its time (on kernels made slower) and launches in
// 60%: not launching without pause beside, so no launch reading, but busy in both, and read by
// the share of its time it did not wait: 0.6 / 0.9.
TEST(ComputeProgress, AJobWhoseHostKeepsBusyIsReadByItsWaits) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t waited = 0;
  int64_t now = FeedWaits(p, 1'000'000'000, &n, &waited, 250, /*beside=*/false, 9, 1);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  EXPECT_EQ(p.waits_reading(), 0u) << "alone only: no reading";
  now = FeedWaits(p, now, &n, &waited, 250, /*beside=*/true, 6, 4);
  const uint32_t by_launches = p.ClosePeriod();
  EXPECT_EQ(by_launches, 0u) << "launching in 60% of passes beside: not by its launches";
  EXPECT_NEAR(p.waits_reading(), 667, 3);
  EXPECT_EQ(PeriodSpeed(1150, by_launches, p.waits_reading()), p.waits_reading())
      << "a kernel reading of 1.15 does not stand where the waits say 0.667";
  // Waiting no longer beside than alone: as fast as alone.
  now = FeedWaits(p, now, &n, &waited, 250, /*beside=*/true, 8, 1);
  p.ClosePeriod();
  EXPECT_NEAR(p.waits_reading(), 1000, 5);
  // Waits not counted (-1): no reading by them.
  ProgressClock uncounted;
  uint64_t m = 0;
  int64_t t = 1'000'000'000;
  for (int i = 0; i < 2500; ++i) uncounted.Pass(t += 200'000, m += (i % 10 < 9 ? 4 : 0), i >= 1250, -1);
  uncounted.ClosePeriod();
  EXPECT_EQ(uncounted.waits_reading(), 0u);
}

// The reading by waits of a job fed a period alone and one beside (FeedWaits's shares).
uint32_t WaitsReadingOf(int alone_moving, int alone_waiting, int beside_moving, int beside_waiting) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t waited = 0;
  const int64_t now = FeedWaits(p, 1'000'000'000, &n, &waited, 250, /*beside=*/false, alone_moving, alone_waiting);
  p.ClosePeriod();
  FeedWaits(p, now, &n, &waited, 250, /*beside=*/true, beside_moving, beside_waiting);
  p.ClosePeriod();
  return p.waits_reading();
}

// A server below full load idles between its requests alone (launches in 40% of its time,
// waits in 10%): its waits say nothing of its speed. A job bound by the GPU launches in a few
// passes and waits on the GPU in the rest: busy, but its host does not set its pace, and its
// kernels' bound reads it. Neither is read by its waits.
TEST(ComputeProgress, AServerOrAJobBoundByTheGpuIsNotReadByItsWaits) {
  EXPECT_EQ(WaitsReadingOf(4, 1, 4, 5), 0u) << "a server";
  EXPECT_EQ(WaitsReadingOf(1, 9, 1, 9), 0u) << "bound by the GPU";
  EXPECT_NEAR(WaitsReadingOf(9, 1, 6, 4), 667, 3) << "bound by its host, as AJobWhoseHostKeepsBusyIsReadByItsWaits";
}

// Two threads waiting at once: the waits add up to more than the time (a host thread that
// launches without pause and another that waits on the GPU most of the time). They are not
// one host's time, and a share not waiting of 0 would read as a job stopped.
TEST(ComputeProgress, WaitsOfSeveralThreadsAtOnceAreNotReadAsOneHosts) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t waited = 0;
  int64_t now = FeedWaits(p, 1'000'000'000, &n, &waited, 250, /*beside=*/false, 9, 1);
  p.ClosePeriod();
  for (int i = 0; i < 1250; ++i) {
    now += 200'000;
    n += 4;
    waited += 180'000;  // the other thread, waiting 90% of the time
    p.Pass(now, n, /*beside=*/true, waited);
  }
  p.ClosePeriod();
  EXPECT_EQ(p.waits_reading(), 0u);
}

TEST(ComputeProgress, AJobLaunchingWithoutPauseIsReadByItsLaunches) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t now = FeedProgress(p, 1'000'000'000, &n, 250, /*beside=*/false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);  // alone only: a rate, no reading
  now = FeedProgress(p, now, &n, 250, /*beside=*/true, 38);
  EXPECT_NEAR(p.ClosePeriod(), 950, 2);
  now = FeedProgress(p, now, &n, 250, /*beside=*/true, 38);
  EXPECT_NEAR(p.ClosePeriod(), 950, 2);
  // What the period saw, for the trace.
  EXPECT_EQ(p.seen().alone_ms, 0);
  EXPECT_EQ(p.seen().beside_ms, 250);
  EXPECT_EQ(p.seen().beside_moved_permille, 1000);
  EXPECT_TRUE(p.seen().fresh);
  // Faster beside than alone (noise about a job that loses nothing) reads so, up to
  // kMaxSpeedPermille: a window's mean of readings clipped at 1 is biased low.
  now = FeedProgress(p, now, &n, 250, /*beside=*/true, 44);
  EXPECT_NEAR(p.ClosePeriod(), 1025, 2);
  now = FeedProgress(p, now, &n, 250, /*beside=*/true, 80);
  EXPECT_EQ(p.ClosePeriod(), kMaxSpeedPermille);
}

TEST(ComputeProgress, ALaunchReadingIsThePeriodsReadingEitherSideOfTheKernelsBound) {
  // Slower launches beside opportunistic work with kernels as fast as alone: a loss off the GPU.
  EXPECT_EQ(PeriodSpeed(1000, 880), 880u);
  // Launches faster than the bound says: the job loses less than its kernels slow down.
  EXPECT_EQ(PeriodSpeed(800, 950), 950u);
  // No launch reading (a job that does not launch without pause, no fresh rate alone).
  EXPECT_EQ(PeriodSpeed(900, 0), 900u);
  EXPECT_EQ(PeriodSpeed(0, 0), 0u);
}

TEST(ComputeProgress, AJobThatIdlesBetweenBurstsIsNotReadByItsLaunches) {
  // A server at half load: launches in half the passes alone, so its launches follow its
  // requests, not its speed; beside opportunistic work it is busier, never read faster.
  ProgressClock p;
  uint64_t n = 0;
  int64_t now = FeedProgress(p, 0, &n, 250, false, 40, /*moving=*/5);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  now = FeedProgress(p, now, &n, 250, true, 40, /*moving=*/10);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  // Saturated alone; beside it waits longer for its kernels and launches in fewer passes: read
  // while it still launches in as many as alone, not once it waits on its kernels in more than
  // kSaturatedShare's rest of them (its kernels' times measure that loss; its launches would be
  // judged against a rate alone taken at another time).
  now = FeedProgress(p, now, &n, 250, false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  now = FeedProgress(p, now, &n, 250, true, 40, /*moving=*/9);
  // (The period's last passes without a launch go to the next one, with the job's next launch:
  // 0.2 ms of 250.)
  EXPECT_NEAR(p.ClosePeriod(), 900, 5);
  now = FeedProgress(p, now, &n, 250, true, 40, /*moving=*/8);
  EXPECT_EQ(p.ClosePeriod(), 0u) << "waits on its kernels in a fifth of its passes";
  now = FeedProgress(p, now, &n, 250, true, 40, /*moving=*/4);
  EXPECT_EQ(p.ClosePeriod(), 0u);
}

TEST(ComputeProgress, ShortStretchesAloneAddUpAcrossPeriods) {
  // Opportunistic work pauses for less than kMinStretchNs at a time: the job's time alone is
  // kept across periods until it is a sample. Each pause starts with kAloneSettleNs (50 ms) in
  // which the job still runs as beside: beside time.
  ProgressClock p;
  uint64_t n = 0;
  int64_t now = FeedProgress(p, 0, &n, 50, true, 30);
  const auto pause = [&](double alone_ms, int moving) {
    now = FeedProgress(p, now, &n, kAloneSettleNs / 1'000'000, false, 30);
    now = FeedProgress(p, now, &n, alone_ms, false, 40, moving);
  };
  pause(60, 10);
  now = FeedProgress(p, now, &n, 140, true, 30);
  EXPECT_EQ(p.ClosePeriod(), 0u);  // 60 ms alone: no rate yet
  EXPECT_LE(std::abs(p.seen().alone_ms - 60), 1);
  EXPECT_FALSE(p.seen().fresh);
  now = FeedProgress(p, now, &n, 250, true, 30);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  pause(60, 10);
  now = FeedProgress(p, now, &n, 140, true, 30);
  EXPECT_NEAR(p.ClosePeriod(), 750, 2);  // 120 ms alone in all: a rate, and a reading
  EXPECT_LE(std::abs(p.seen().alone_ms - 60), 1);
  EXPECT_TRUE(p.seen().fresh);
  // Fragments alone in which the job idles undo it: it is not read by its launches.
  pause(60, 5);
  now = FeedProgress(p, now, &n, 140, true, 30);
  EXPECT_NEAR(p.ClosePeriod(), 750, 2);
  pause(60, 5);
  now = FeedProgress(p, now, &n, 140, true, 30);
  EXPECT_EQ(p.ClosePeriod(), 0u);
}

// Opportunistic work whose queue runs empty for a few ms between its steps: the job's host
// still waits on its own work slowed beside it (its step's synchronisation), and those moments
// are not its speed alone. Alone the job launches in 9 of 10 passes and waits in 1; beside
// (queue empty in 1 pass of 10) it launches in 6 and waits in 4, whichever pass the queue is
// empty in. Read against a pause's time alone: 0.6 / 0.9 by its waits, 6 / 9 by its launch
// rate. Were the empty moments time alone, the reference would be the beside job's own 0.6,
// and the reading 1.0.
TEST(ComputeProgress, MomentsBetweenOpportunisticStepsAreNotTimeAlone) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t waited = 0, now = 1'000'000'000;
  const auto feed = [&](double ms, bool pause) {
    for (int i = 0; i < static_cast<int>(ms * 5); ++i) {
      now += 200'000;
      const int moving = pause ? 9 : 6;
      if (i % 10 < moving) {
        n += 4;
      } else if (i % 10 < moving + (pause ? 1 : 4)) {
        waited += 200'000;
      }
      p.Pass(now, n, /*queued=*/!pause && i % 10 != 7, waited);
    }
  };
  feed(250, /*pause=*/true);
  p.ClosePeriod();
  for (int period = 0; period < 8; ++period) {
    feed(250, /*pause=*/false);
    p.ClosePeriod();
    EXPECT_EQ(p.seen().alone_ms, 0) << period;
    EXPECT_NEAR(p.waits_reading(), 667, 5) << period;
    EXPECT_NEAR(p.seen().launch_rate_permille, 667, 5) << period;
  }
}

// A job read by its waits or launches asks for time alone once its references are
// kAloneRenewNs old (its passes with a launch since), beside opportunistic work only; a pause
// renews them.
TEST(ComputeProgress, AJobReadByItsHostAsksForTimeAloneToRenewItsReferences) {
  // A job fed by FeedWaits, period by period.
  struct Job {
    ProgressClock clock;
    uint64_t launches = 0;
    int64_t waited = 0, now = 1'000'000'000;
    void Feed(double ms, bool beside, int moving, int waiting) {
      now = FeedWaits(clock, now, &launches, &waited, ms, beside, moving, waiting);
    }
  };
  Job job;
  job.Feed(250, /*beside=*/false, 9, 1);
  job.clock.ClosePeriod();
  EXPECT_FALSE(job.clock.wants_alone()) << "alone: nothing to compare";
  int periods = 0;
  while (!job.clock.wants_alone()) {
    job.Feed(250, /*beside=*/true, 6, 4);
    job.clock.ClosePeriod();
    ASSERT_GT(job.clock.waits_reading(), 0u);
    ASSERT_LE(++periods, 100);
  }
  // Its passes with a launch are 6 in 10: 150 ms of each period.
  EXPECT_EQ(periods, (kAloneRenewNs + 149'999'999) / 150'000'000);
  // A pause: settling, then time alone; the next period beside no longer asks.
  job.Feed(kAloneSettleNs / 1'000'000 + 150, /*beside=*/false, 9, 1);
  job.Feed(250, /*beside=*/true, 6, 4);
  job.clock.ClosePeriod();
  EXPECT_FALSE(job.clock.wants_alone());
  // A server below full load has no reference alone: it never asks.
  Job server;
  server.Feed(250, /*beside=*/false, 4, 1);
  server.clock.ClosePeriod();
  for (int i = 0; i < 2 * periods; ++i) {
    server.Feed(250, /*beside=*/true, 4, 5);
    server.clock.ClosePeriod();
    ASSERT_FALSE(server.clock.wants_alone()) << i;
  }
}

// A job that launches without pause but never had time alone (it started beside opportunistic
// work, and no pause came: its kernels' baselines were all taken) has no reference to read its
// launches against: it asks for time alone to take its first, as it would to renew one. A job
// that launches in few of its passes beside (one bound by the GPU, a server) does not.
TEST(ComputeProgress, AJobThatNeverHadTimeAloneAsksForItsFirst) {
  ProgressClock loop, seldom;
  uint64_t n = 0, m = 0;
  int64_t now = 0, later = 0;
  int periods = 0;
  while (!loop.wants_alone()) {
    now = FeedProgress(loop, now, &n, 250, /*beside=*/true, 20, /*moving=*/9);
    EXPECT_EQ(loop.ClosePeriod(), 0u) << "no rate alone";
    ASSERT_LE(++periods, 100);
    later = FeedProgress(seldom, later, &m, 250, /*beside=*/true, 20, /*moving=*/3);
    seldom.ClosePeriod();
    ASSERT_FALSE(seldom.wants_alone()) << periods;
  }
  // Its passes with a launch are 9 in 10: 225 ms of each period.
  EXPECT_EQ(periods, (kAloneRenewNs + 224'999'999) / 225'000'000);
  // The pause: settling, then time alone; beside again, it is read by its launches.
  now = FeedProgress(loop, now, &n, kAloneSettleNs / 1'000'000 + 150, /*beside=*/false, 40, /*moving=*/9);
  loop.ClosePeriod();
  now = FeedProgress(loop, now, &n, 250, /*beside=*/true, 20, /*moving=*/9);
  EXPECT_NEAR(loop.ClosePeriod(), 500, 5);
  EXPECT_FALSE(loop.wants_alone());
}

// A loop is one from its first period beside, reference or not; a job that launches in few of
// its passes and waits on nothing the hooks see (a server between requests) is not.
TEST(ComputeProgress, ALoopIsOneBeforeItHasAReference) {
  ProgressClock loop, server;
  uint64_t n = 0, m = 0;
  int64_t now = FeedProgress(loop, 0, &n, 250, /*beside=*/true, 20, /*moving=*/9);
  EXPECT_EQ(loop.ClosePeriod(), 0u);
  EXPECT_TRUE(loop.loop());
  // A period with too little time beside (a pause) keeps the word.
  now = FeedProgress(loop, now, &n, 250, /*beside=*/false, 20, /*moving=*/9);
  loop.ClosePeriod();
  EXPECT_TRUE(loop.loop());
  FeedProgress(server, 0, &m, 250, /*beside=*/true, 20, /*moving=*/3);
  server.ClosePeriod();
  EXPECT_FALSE(server.loop());
}

TEST(ComputeProgress, ARateAloneGoesStaleAndShortStretchesAreNoSample) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t now = FeedProgress(p, 0, &n, 250, false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  // Less than kMinStretchNs beside in a period: no reading.
  now = FeedProgress(p, now, &n, 50, true, 20);
  now = FeedProgress(p, now, &n, 200, false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  now = FeedProgress(p, now, &n, 250, true, 20);
  EXPECT_NEAR(p.ClosePeriod(), 500, 2);
  // Beside only for as long as the kernels' baselines keep, and a period or two more (their
  // pause comes then): the rate alone still holds.
  const int64_t alone_at = now;
  while (now - alone_at < kBaselineRefreshNs + 2 * kControlPeriodNs) {
    now = FeedProgress(p, now, &n, 250, true, 20);
    ASSERT_NEAR(p.ClosePeriod(), 500, 2) << (now - alone_at) / 1'000'000 << " ms after the rate alone";
  }
  // Beside only for longer than kAloneRateFreshNs: the rate alone is stale.
  while (now - alone_at <= kAloneRateFreshNs) {
    now = FeedProgress(p, now, &n, 250, true, 20);
    p.ClosePeriod();
  }
  now = FeedProgress(p, now, &n, 250, true, 20);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  // A pass after a long gap is not split: the launches in between count nowhere.
  now += 1'000'000'000;
  n += 1'000'000;
  p.Pass(now, n, true);
  now = FeedProgress(p, now, &n, 250, false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  now = FeedProgress(p, now, &n, 250, true, 40);
  EXPECT_NEAR(p.ClosePeriod(), 1000, 2);
}

TEST(ComputeProgress, ARateAloneAgesWhileTheJobLaunchesNotWhileItRests) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t now = FeedProgress(p, 0, &n, 250, false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  // Beside for most of kAloneRateFreshNs, then resting beside opportunistic work (passes
  // without a launch) for longer than it, then launching again: the rate alone holds.
  for (int64_t ran = 0; ran < kAloneRateFreshNs - 2 * kControlPeriodNs; ran += kControlPeriodNs) {
    now = FeedProgress(p, now, &n, 250, true, 20);
    ASSERT_NEAR(p.ClosePeriod(), 500, 2) << ran;
  }
  for (int64_t rest = 0; rest <= kAloneRateFreshNs; rest += kControlPeriodNs) {
    now = FeedProgress(p, now, &n, 250, true, 20, /*moving=*/0);
    p.ClosePeriod();
  }
  now = FeedProgress(p, now, &n, 250, true, 20);
  EXPECT_NEAR(p.ClosePeriod(), 500, 2) << "a rest does not age the rate alone";
  // Launching on past kAloneRateFreshNs: stale.
  for (int i = 0; i < 8; ++i) {
    now = FeedProgress(p, now, &n, 250, true, 20);
    p.ClosePeriod();
  }
  now = FeedProgress(p, now, &n, 250, true, 20);
  EXPECT_EQ(p.ClosePeriod(), 0u);
}

TEST(ComputeProgress, ARestIsNeitherAloneNorBeside) {
  ProgressClock p;
  uint64_t n = 0;
  int64_t now = FeedProgress(p, 0, &n, 250, false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  now = FeedProgress(p, now, &n, 250, true, 38);
  EXPECT_NEAR(p.ClosePeriod(), 950, 2);
  // A rest of `periods` periods without a launch, opportunistic work queued or not: no reading.
  const auto rest = [&](int periods, bool beside) {
    for (int i = 0; i < periods; ++i) {
      now = FeedProgress(p, now, &n, 250, beside, 40, /*moving=*/0);
      ASSERT_EQ(p.ClosePeriod(), 0u);
    }
  };
  // The job rests 5 s, opportunistic work resting too, then comes back beside it and, in the
  // pause its kernels' baselines ask for, alone for 60 ms: its rate alone holds, and it is read
  // at once.
  rest(20, /*beside=*/false);
  now = FeedProgress(p, now, &n, 60, false, 40);
  now = FeedProgress(p, now, &n, 190, true, 38);
  EXPECT_NEAR(p.ClosePeriod(), 950, 2) << "the rest is not read as time alone without launches";
  EXPECT_TRUE(p.seen().fresh);
  EXPECT_EQ(p.seen().alone_moved_permille, 1000);
  // A rest beside opportunistic work is not read as a job that stopped beside it.
  rest(8, /*beside=*/true);
  now = FeedProgress(p, now, &n, 250, true, 38);
  EXPECT_NEAR(p.ClosePeriod(), 950, 2);
  // A stop shorter than kRestNs is the job's own time: 300 ms without a launch alone, in a
  // stretch of 250 ms launching, is not a job that launches without pause.
  now = FeedProgress(p, now, &n, 250, false, 40);
  now = FeedProgress(p, now, &n, 300, false, 40, /*moving=*/0);
  now = FeedProgress(p, now, &n, 1, false, 40);
  p.ClosePeriod();
  now = FeedProgress(p, now, &n, 250, true, 38);
  EXPECT_EQ(p.ClosePeriod(), 0u) << "not saturated alone: no rate, no reading";
  // Beside, such a stop is the job's time too (it waited on its own work): 20 ms of 251.
  now = FeedProgress(p, now, &n, 250, false, 40);
  EXPECT_EQ(p.ClosePeriod(), 0u);
  now = FeedProgress(p, now, &n, 230, true, 40);
  now = FeedProgress(p, now, &n, 20, true, 40, /*moving=*/0);
  now = FeedProgress(p, now, &n, 1, true, 40);
  EXPECT_NEAR(p.ClosePeriod(), 920, 3);
}

TEST(ComputeKernels, EachKernelIsJudgedAgainstItselfAlone) {
  KernelClock k;
  const uint64_t small = KernelKey({.function = &k, .grid = {1, 1, 1}, .block = {128, 1, 1}});
  const uint64_t large = KernelKey({.function = &k, .grid = {4096, 1, 1}, .block = {128, 1, 1}});
  ASSERT_NE(small, large) << "one function with another grid is another kernel";
  for (int i = 0; i < 4; ++i) {
    k.Add(small, 10'000, /*beside=*/false);
    k.Add(large, 1'000'000, false);
  }
  EXPECT_DOUBLE_EQ(k.Baseline(small), 10'000);
  // Beside opportunistic work: the small kernel 20% slower, the large one as fast. A period of
  // mostly small kernels and one of mostly large ones each read their own kernels' slowdown,
  // whatever the mix: sum of baselines over sum of times.
  for (int i = 0; i < 9; ++i) k.Add(small, 12'500, true);
  KernelSignal s = k.ClosePeriod(1);
  EXPECT_EQ(s.speed_permille, 800u);
  EXPECT_EQ(s.sequence, 1u);
  EXPECT_FALSE(s.wants_baseline);
  for (int i = 0; i < 9; ++i) k.Add(large, 1'000'000, true);
  s = k.ClosePeriod(2);
  EXPECT_EQ(s.speed_permille, 1000u);
  for (int i = 0; i < kMinSignalSamples - 1; ++i) k.Add(large, 2'000'000, true);
  s = k.ClosePeriod(3);
  EXPECT_FALSE(s.known()) << "too few samples to tell";
  EXPECT_TRUE(s.pending);
  // ... carried into the next period, which reads them together.
  k.Add(large, 2'000'000, true);
  s = k.ClosePeriod(4);
  EXPECT_EQ(s.speed_permille, 500u);
  EXPECT_FALSE(s.pending);
  // Faster than alone reads so (noise, for the controller's mean), up to kMaxSpeedPermille.
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(large, 950'000, true);
  EXPECT_EQ(k.ClosePeriod(5).speed_permille, 1053u);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(small, 5'000, true);
  EXPECT_EQ(k.ClosePeriod(6).speed_permille, kMaxSpeedPermille);
}

TEST(ComputeKernels, SamplesTooFewToReadAreCarriedForAFewPeriods) {
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {2, 1, 1}});
  for (int i = 0; i < 4; ++i) k.Add(key, 100'000, false);
  k.ClosePeriod(0);
  // Two samples a period beside opportunistic work, each twice as slow as alone: a reading
  // once four periods have eight, over their launches, time and waits together (the kernels
  // 800 ms of the 1 s beside, 400 ms alone: the same work alone in 600 ms).
  KernelSignal s;
  for (uint32_t p = 1; p <= 4; ++p) {
    for (int i = 0; i < 2; ++i) k.Add(key, 200'000, true);
    s = k.ClosePeriod(p, 1000, kControlPeriodNs, -1);
    if (p < 4) {
      EXPECT_FALSE(s.known()) << p;
      EXPECT_TRUE(s.pending) << p;
    }
  }
  EXPECT_EQ(s.speed_permille, 600u);
  EXPECT_FALSE(s.pending);
  // Waits known in every period bound it over their sum; one period's unknown waits, not.
  for (uint32_t p = 5; p <= 8; ++p) {
    for (int i = 0; i < 2; ++i) k.Add(key, 200'000, true);
    s = k.ClosePeriod(p, 1000, kControlPeriodNs, 2'500'000);
  }
  EXPECT_EQ(s.speed_permille, 990u) << "waited 10 ms of 1 s";
  for (uint32_t p = 9; p <= 12; ++p) {
    for (int i = 0; i < 2; ++i) k.Add(key, 200'000, true);
    s = k.ClosePeriod(p, 1000, kControlPeriodNs, p == 10 ? -1 : 2'500'000);
  }
  EXPECT_EQ(s.speed_permille, 600u);
  // Three samples, then none: after kMaxCarriedPeriods they are dropped, too old to read
  // together, and no reading is pending.
  for (int i = 0; i < 3; ++i) k.Add(key, 200'000, true);
  for (uint32_t p = 13; p < 13 + kMaxCarriedPeriods; ++p) {
    s = k.ClosePeriod(p);
    EXPECT_FALSE(s.known()) << p;
    EXPECT_EQ(s.pending, p + 1 < 13 + kMaxCarriedPeriods) << p;
  }
  // A period with none beside opportunistic work has nothing pending.
  EXPECT_FALSE(k.ClosePeriod(30).pending);
}

TEST(ComputeKernels, AJobLosesAtMostItsBusyShareOfItsKernelsSlowdown) {
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {8, 1, 1}});
  for (int i = 0; i < 4; ++i) k.Add(key, 100'000, false);
  k.ClosePeriod(1);
  // Beside opportunistic work its kernels take 1.25x as long (r = 0.8).
  const auto period = [&](uint64_t launches) {
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 125'000, true);
    return k.ClosePeriod(1, launches, kControlPeriodNs).speed_permille;
  };
  // 2500 launches: their kernels fill the period; the job loses all their slowdown.
  EXPECT_EQ(period(2500), 800u);
  // 1000 launches: their kernels 125 ms of the 250 beside, 100 alone; alone the job runs the
  // same in 225 ms, the kernels 44% of that time: 1 / (1 + 0.44 x 0.25).
  EXPECT_EQ(period(1000), 900u);
  // Too few launches to count: read as busy, r.
  EXPECT_EQ(period(0), 800u);
  EXPECT_EQ(period(100000), 800u) << "kernels longer than the period (miscounted) fill it";
}

TEST(ComputeKernels, AJobLosesAtMostWhatItsHostWaitedOnTheGpu) {
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {8, 1, 1}});
  for (int i = 0; i < 4; ++i) k.Add(key, 100'000, false);
  k.ClosePeriod(1);
  // Kernels 1.25x as long beside opportunistic work (r = 0.8), the GPU busy all the time.
  const auto period = [&](int64_t waited_ns) {
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 125'000, true);
    return k.ClosePeriod(1, 2500, kControlPeriodNs, waited_ns).speed_permille;
  };
  // The host waited 5 ms of 250 on the GPU: the job lost at most 2% (1 / 1.02).
  EXPECT_EQ(period(5'000'000), 980u);
  EXPECT_EQ(period(0), 1000u) << "a host that never waits loses nothing to slower kernels";
  // Waits longer than the kernels' loss leave the kernel bound.
  EXPECT_EQ(period(200'000'000), 800u);
  // Not known (or a launch found the queue full): the kernel bound.
  EXPECT_EQ(period(-1), 800u);
  // Kernels faster than their baselines (noise about a job that loses nothing): a gain, bounded
  // by the waits as the loss is.
  const auto faster = [&](int64_t waited_ns) {
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 95'238, true);
    return k.ClosePeriod(1, 2500, kControlPeriodNs, waited_ns).speed_permille;
  };
  EXPECT_EQ(faster(-1), 1048u) << "the kernels' 1.05, on the job's busy share of its time";
  EXPECT_EQ(faster(5'000'000), 1020u) << "gained at most its waits: 1 / (1 - 0.02)";
}

TEST(ComputeKernels, AFullQueueIsASteadyStateNotOneLongLaunch) {
  // One long launch among a period's twenty-odd timed ones is the host's scheduling.
  EXPECT_FALSE(WaitedInAFullQueue(22, 1));
  EXPECT_FALSE(WaitedInAFullQueue(22, 5));
  EXPECT_FALSE(WaitedInAFullQueue(22, 0));
  EXPECT_FALSE(WaitedInAFullQueue(0, 0));
  // A quarter of them or more: the queue was full.
  EXPECT_TRUE(WaitedInAFullQueue(22, 6));
  EXPECT_TRUE(WaitedInAFullQueue(22, 22));
  // A job of long kernels times few launches a period; each of them waited.
  EXPECT_TRUE(WaitedInAFullQueue(1, 1));
  EXPECT_TRUE(WaitedInAFullQueue(3, 1));
}

TEST(ComputeKernels, KernelsWithoutABaselineAskForOne) {
  KernelClock k;
  for (unsigned i = 0; i < 2 * kMinSignalSamples; ++i) k.Add(KernelKey({.function = &k, .grid = {i, 1, 1}}), 1000, true);
  KernelSignal s = k.ClosePeriod(1);
  EXPECT_FALSE(s.known());
  EXPECT_TRUE(s.wants_baseline) << "none of the kernels beside opportunistic work has a time alone";
  // One sample alone gives a baseline to read by, but is no measure of the job alone: asked
  // for again until its baselines rest on kMinBaselineSamples.
  const uint64_t key = KernelKey({.function = &k, .grid = {1, 1, 1}});
  k.Add(key, 1000, false);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 1000, true);
  s = k.ClosePeriod(2);
  EXPECT_EQ(s.speed_permille, 1000u);
  EXPECT_TRUE(s.wants_baseline) << "one sample alone";
  for (int i = 1; i < kMinBaselineSamples; ++i) k.Add(key, 1000, false);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 1000, true);
  s = k.ClosePeriod(2);
  EXPECT_EQ(s.speed_permille, 1000u);
  EXPECT_FALSE(s.wants_baseline);
  // A stale baseline, once the job ran kBaselineRefreshNs beside opportunistic work: asked for
  // again while opportunistic work runs.
  uint32_t seq = 3;
  for (int64_t ran = 0; ran <= kBaselineRefreshNs; ran += kControlPeriodNs) {
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 1000, true);
    s = k.ClosePeriod(seq++, 100, kControlPeriodNs);
    EXPECT_TRUE(s.known());
    if (ran + kControlPeriodNs < kBaselineRefreshNs) {
      ASSERT_FALSE(s.wants_baseline) << ran;
    }
  }
  EXPECT_TRUE(s.wants_baseline);
  EXPECT_FALSE(k.ClosePeriod(seq++).wants_baseline) << "no opportunistic work: nothing to judge";
}

TEST(ComputeKernels, KernelsFasterBesideThanTheirBaselinesAskForNewOnes) {
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {1, 1, 1}});
  // A baseline from one slow sample (the GPU's clocks still ramping up), then the kernel beside
  // opportunistic work at 4 ms: faster than "alone", which cannot be.
  k.Add(key, 5'000'000, false);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 4'000'000, true);
  KernelSignal s = k.ClosePeriod(1);
  EXPECT_EQ(s.speed_permille, kMaxSpeedPermille);
  EXPECT_TRUE(s.wants_baseline) << "a baseline slower than the kernel runs beside is wrong";
  // Asked again in a period with no reading yet (the samples carried).
  k.Add(key, 4'000'000, true);
  EXPECT_TRUE(k.ClosePeriod(2).wants_baseline);
  // The pause it asked for: the kernel alone at 2 ms, and the baseline follows.
  for (int i = 0; i < 12; ++i) k.Add(key, 2'000'000, false);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 4'000'000, true);
  s = k.ClosePeriod(3);
  EXPECT_LT(s.speed_permille, 650u);  // about 2.1 ms alone against 4 ms beside
  EXPECT_FALSE(s.wants_baseline);
  // Within the noise of its time alone (5% faster): a reading, no new baseline.
  KernelClock near;
  for (int i = 0; i < kMinBaselineSamples; ++i) near.Add(key, 2'000'000, false);
  for (int i = 0; i < kMinSignalSamples; ++i) near.Add(key, 1'900'000, true);
  s = near.ClosePeriod(1);
  EXPECT_EQ(s.speed_permille, 1053u);
  EXPECT_FALSE(s.wants_baseline);
}

TEST(ComputeKernels, KernelsStillFasterAfterNewBaselinesDoNotAskAgain) {
  // Timed alone at 2.2 ms (a launch-bound job's host gaps in them), beside opportunistic work at
  // 1.9 ms: faster than alone, and new baselines read the same. One ask, not one a period.
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {3, 1, 1}});
  auto alone = [&k, key]() {
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 2'200'000, false);
  };
  auto beside = [&k, key](int64_t ns) {
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, ns, true);
  };
  alone();
  beside(1'900'000);
  uint32_t seq = 0;
  KernelSignal s = k.ClosePeriod(++seq);
  EXPECT_EQ(s.speed_permille, 1158u);
  EXPECT_TRUE(s.wants_baseline);
  EXPECT_STREQ(k.wanted_because(), "kernels faster than alone");
  beside(1'900'000);
  EXPECT_TRUE(k.ClosePeriod(++seq).wants_baseline) << "still asking: no baseline taken since";
  // The pause it asked for renews the baselines, and they read as before.
  alone();
  for (int i = 0; i < 20; ++i) {
    beside(1'900'000);
    s = k.ClosePeriod(++seq);
    ASSERT_EQ(s.speed_permille, 1158u);
    ASSERT_FALSE(s.wants_baseline) << i << ": asked once, answered";
  }
  // A reading no faster than alone ends the stretch; the next faster one asks again.
  beside(2'400'000);
  s = k.ClosePeriod(++seq);
  EXPECT_LT(s.speed_permille, 1000u);
  EXPECT_FALSE(s.wants_baseline);
  beside(1'900'000);
  EXPECT_TRUE(k.ClosePeriod(++seq).wants_baseline);
}

// Kernels faster beside than their baselines ask for new ones only in a period whose reading
// is theirs: a job read by its launches or waits drops such an ask. One whose baselines rest
// on one sample alone asks whichever reading the period's is.
TEST(ComputeKernels, KernelsFasterThanAloneAskOnlyWhereTheyGiveTheReading) {
  const auto faster = [](int alone_samples, bool kernels_read) {
    KernelClock k;
    const uint64_t key = KernelKey({.function = &k, .grid = {3, 1, 1}});
    for (int i = 0; i < alone_samples; ++i) k.Add(key, 2'200'000, false);
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 1'900'000, true);
    const KernelSignal s = k.ClosePeriod(1, 0, 0, -1, kernels_read);
    return std::make_pair(s.wants_baseline, std::string(k.wanted_because()));
  };
  EXPECT_EQ(faster(kMinSignalSamples, true), std::make_pair(true, std::string("kernels faster than alone")));
  EXPECT_EQ(faster(kMinSignalSamples, false), std::make_pair(false, std::string()))
      << "a job read by its launches drops such an ask";
  EXPECT_EQ(faster(1, false), std::make_pair(true, std::string("too few samples alone")))
      << "one sample alone: it wants baselines anyway";
}

// A baseline from one slow sample alone (the kernel 1.8x its time alone; kernels beside
// opportunistic work that doubles their time then read about 0.9 of alone, which no
// faster-than-alone check can tell): the job asks for the pause that times its kernels alone,
// and their samples outweigh the first.
TEST(ComputeKernels, ABaselineFromOneSampleAloneAsksForMore) {
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {1, 1, 1}});
  k.Add(key, 3'600'000, false);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 4'000'000, true);
  KernelSignal s = k.ClosePeriod(1);
  EXPECT_EQ(s.speed_permille, 900u);
  EXPECT_TRUE(s.wants_baseline);
  // The pause: twenty samples alone at 2 ms, as a dense pause on the simulator takes.
  for (int i = 0; i < 20; ++i) k.Add(key, 2'000'000, false);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 4'000'000, true);
  s = k.ClosePeriod(2);
  EXPECT_NEAR(s.speed_permille, 500, 5);
  EXPECT_FALSE(s.wants_baseline);
}

// One sample alone that waited for free SM slots (taken as opportunistic work's blocks left
// them, 2 ms for a 20 us kernel) among the kernel's samples alone: its baseline stays its time
// alone, and the kernel 10% slower beside opportunistic work reads so, not faster than alone.
TEST(ComputeKernels, OneSlowSampleAloneDoesNotMoveAKernelsBaseline) {
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {64, 1, 1}, .block = {256, 1, 1}});
  for (int i = 0; i < kMinBaselineSamples - 1; ++i) k.Add(key, 20'000, false);
  k.Add(key, 2'000'000, false);
  EXPECT_DOUBLE_EQ(k.Baseline(key), 20'000);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 22'000, true);
  KernelSignal s = k.ClosePeriod(1);
  EXPECT_EQ(s.speed_permille, 909u);
  EXPECT_FALSE(s.wants_baseline);
  // It stays out as newer samples come, until it is the oldest of five and falls out.
  for (int i = 0; i < 3; ++i) k.Add(key, 21'000, false);
  EXPECT_DOUBLE_EQ(k.Baseline(key), 21'000);
  // Where most of the newest samples alone say the kernel takes longer now, the baseline follows.
  for (int i = 0; i < 3; ++i) k.Add(key, 30'000, false);
  EXPECT_DOUBLE_EQ(k.Baseline(key), 30'000);
  // Two samples: the shorter (errs on the job's side).
  KernelClock two;
  two.Add(key, 20'000, false);
  two.Add(key, 2'000'000, false);
  EXPECT_DOUBLE_EQ(two.Baseline(key), 20'000);
}

TEST(ComputeKernels, APeriodAcrossARestIsNotReadAsIdle) {
  // A job that keeps the GPU half busy alone (500 launches of 1 ms kernels a second; 333 beside
  // opportunistic work that doubles its kernels' times), back from a minute's rest: the period
  // timed across the rest counts 1 s, not 61, so the reading is 1 / (1 + 0.5 (2 - 1)), not
  // nearly 1.
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {9, 1, 1}});
  k.Add(key, 1'000'000, false);
  k.ClosePeriod(1, 100, kControlPeriodNs);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 2'000'000, true);
  const KernelSignal s = k.ClosePeriod(2, 333, 61'000'000'000);
  EXPECT_NEAR(s.speed_permille, 667, 2);
}

TEST(ComputeKernels, ABaselineAgesWhileTheJobRunsNotWhileItRests) {
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {7, 1, 1}});
  uint32_t seq = 1;
  for (int i = 0; i < kMinBaselineSamples; ++i) k.Add(key, 1000, false);
  k.ClosePeriod(seq++, 100, kControlPeriodNs);
  // Beside opportunistic work for half the refresh time, a minute's rest, and back: a period
  // timed across a rest counts at most a second, one not timed nothing.
  const auto run = [&](int64_t for_ns) {
    KernelSignal s;
    for (int64_t t = 0; t < for_ns; t += kControlPeriodNs) {
      for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 1000, true);
      s = k.ClosePeriod(seq++, 100, kControlPeriodNs);
    }
    return s;
  };
  EXPECT_FALSE(run(kBaselineRefreshNs / 2).wants_baseline);
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 1000, true);
  EXPECT_FALSE(k.ClosePeriod(seq++, 100, 60'000'000'000).wants_baseline) << "a rest timed as one period";
  for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, 1000, true);
  EXPECT_FALSE(k.ClosePeriod(seq++).wants_baseline) << "a rest in a period not timed";
  EXPECT_FALSE(run(kBaselineRefreshNs / 2 - 3 * kMaxCountedPeriodNs).wants_baseline);
  EXPECT_TRUE(run(4 * kMaxCountedPeriodNs).wants_baseline) << "it ran past the refresh time: stale";
  // A fresh alone sample renews it.
  k.Add(key, 1000, false);
  EXPECT_FALSE(run(kControlPeriodNs).wants_baseline);
}

TEST(ComputeKernels, ALaunchTimedOnADryStreamMeasuresOnlyALongKernel) {
  // The stream had work queued when the kernel was launched: the pair times the kernel.
  EXPECT_TRUE(MeasuresTheKernel(/*stream_dry=*/false, 20'000));
  // It had run dry: the pair times the host's launch too, some microseconds, which a short
  // kernel's time cannot carry and a long one's can.
  EXPECT_FALSE(MeasuresTheKernel(/*stream_dry=*/true, 20'000));
  EXPECT_FALSE(MeasuresTheKernel(true, kDryStreamMinNs - 1));
  EXPECT_TRUE(MeasuresTheKernel(true, kDryStreamMinNs));
}

TEST(ComputeKernels, TheSignalPacksIntoOneWord) {
  const KernelSignal s{.speed_permille = 873, .wants_baseline = true, .sequence = 0xfffe};
  const KernelSignal t = UnpackKernelSignal(PackKernelSignal(s));
  EXPECT_EQ(t.speed_permille, 873u);
  EXPECT_TRUE(t.wants_baseline);
  EXPECT_EQ(t.sequence, 0xfffeu);
  EXPECT_EQ(UnpackKernelSignal(PackKernelSignal({.speed_permille = 1100, .sequence = 1})).speed_permille, 1100u)
      << "faster than alone: noise, kept for the controller's mean";
  EXPECT_EQ(UnpackKernelSignal(PackKernelSignal({.speed_permille = 5000, .sequence = 1})).speed_permille,
            kMaxSpeedPermille);
  EXPECT_FALSE(UnpackKernelSignal(0).known());
  const KernelSignal alone = UnpackKernelSignal(PackKernelSignal({.speed_permille = 950, .wants_alone = true, .sequence = 3}));
  EXPECT_TRUE(alone.wants_alone);
  EXPECT_FALSE(alone.wants_baseline);
  EXPECT_EQ(alone.speed_permille, 950u);
  EXPECT_FALSE(t.wants_alone);
  const KernelSignal loop = UnpackKernelSignal(PackKernelSignal({.speed_permille = 910, .by_progress = true, .sequence = 4}));
  EXPECT_TRUE(loop.by_progress);
  EXPECT_FALSE(loop.wants_alone);
  EXPECT_EQ(loop.speed_permille, 910u);
  EXPECT_EQ(loop.sequence, 4u);
  EXPECT_FALSE(t.by_progress);
}

// ---- MPS -------------------------------------------------------------------------------

// A guaranteed peer's period on MPS with its kernel reading (speed 0: none).
PeerPeriod Kernels(uint32_t speed_permille, uint32_t sequence, uint32_t floor_permille = kProtectDefaultPermille,
                   bool wants_baseline = false, int id = 7) {
  PeerPeriod p = Peer(1, 0.5, floor_permille, id);
  p.kernel_signal = PackKernelSignal({.speed_permille = speed_permille, .wants_baseline = wants_baseline, .sequence = sequence});
  return p;
}

// Drives an MpsController on simulated time, one period per call.
struct MpsClock {
  MpsController c;
  int64_t now = 0;
  ControlDecision Step(const ControlPeriod& p) {
    now += kControlPeriodNs;
    return c.Decide(p, now);
  }
};

TEST(ComputeMps, WhereTheFloorHoldsUnthrottledNothingIsHeldBack) {
  // The guaranteed job's kernels at 0.98 of alone, floor 0.97: opportunistic work runs as plain
  // MPS at priority 1 would, every period, with no probe once baselines exist.
  MpsClock m;
  for (uint32_t seq = 1; seq <= 400; ++seq) {
    const ControlDecision d = m.Step(Busy({Kernels(980, seq, 970)}));
    ASSERT_EQ(d.rate_permille, 1000u) << seq << " " << Trace(d);
    ASSERT_FALSE(d.probe_pause) << seq;
  }
  // No reading at all (the guaranteed job runs no timed kernels): the same.
  for (int i = 0; i < 40; ++i) EXPECT_EQ(m.Step(Busy({Peer(1, 0.5)})).rate_permille, 1000u);
}

TEST(ComputeMps, AReadingUnderTheFloorCutsAndTheRateComesBack) {
  MpsClock m;
  uint32_t seq = 0;
  for (uint32_t i = 1; i < kJudgePeriods; ++i) {
    EXPECT_EQ(m.Step(Busy({Kernels(960, ++seq, 970)})).rate_permille, 1000u) << "a little under, not for 2 s yet";
  }
  // Under for 2 s, by 1%: cut in proportion, by kCutGain times the shortfall.
  ControlDecision d = m.Step(Busy({Kernels(960, ++seq, 970)}));
  EXPECT_EQ(d.rate_permille, 948u) << Trace(d);
  d = m.Step(Busy({Kernels(700, ++seq, 970)}));
  EXPECT_EQ(d.rate_permille, 474u) << "far under the floor: halved at once";
  // The same reading twice (no new period published) is not judged again.
  EXPECT_EQ(m.Step(Busy({Kernels(700, seq, 970)})).rate_permille, 474u);
  // Above the floor for a second: the rate grows back, by a quarter and at least
  // kGrowStepPermille, and the next second is judged at the new rate.
  for (uint32_t i = 1; i < kGrowPeriods; ++i) {
    EXPECT_EQ(m.Step(Busy({Kernels(990, ++seq, 970)})).rate_permille, 474u) << "above for less than a second";
  }
  d = m.Step(Busy({Kernels(990, ++seq, 970)}));
  EXPECT_EQ(d.rate_permille, 592u) << Trace(d);
  for (uint32_t i = 1; i < kGrowPeriods; ++i) EXPECT_EQ(m.Step(Busy({Kernels(990, ++seq, 970)})).rate_permille, 592u);
  EXPECT_EQ(m.Step(Busy({Kernels(990, ++seq, 970)})).rate_permille, 740u);
  for (int i = 0; i < 40; ++i) d = m.Step(Busy({Kernels(990, ++seq, 970)}));
  EXPECT_EQ(d.rate_permille, 1000u);
  // A window 10% under or more: halved, no more.
  MpsClock far;
  for (uint32_t i = 1; i <= kJudgePeriods; ++i) d = far.Step(Busy({Kernels(870, i, 970)}));
  EXPECT_EQ(d.rate_permille, 500u) << Trace(d);
  // At the floor (within kGrowMargin): it holds where it is.
  m.Step(Busy({Kernels(900, ++seq, 970)}));
  const uint32_t held = m.c.rate_permille();
  EXPECT_EQ(m.Step(Busy({Kernels(975, ++seq, 970)})).rate_permille, held);
}

TEST(ComputeMps, AJobAtItsSpeedAloneIsNotHeldBackByReadingsClippedAtAlone) {
  // A guaranteed job that loses nothing beside opportunistic work: its kernels read 0.91 and 1.10
  // of alone in turn (noise about 1.00), floor 0.97. From its kernel clock through the ledger's
  // word to the controller: readings clipped at 1 would average 0.955, under the floor, and the
  // rate a dip cut would never grow back (the mean never 1% above the floor).
  KernelClock k;
  const uint64_t key = KernelKey({.function = &k, .grid = {5, 1, 1}});
  for (int i = 0; i < kMinBaselineSamples; ++i) k.Add(key, 100'000, /*beside=*/false);
  uint32_t seq = 0;
  const auto reading = [&](int64_t ns) {
    for (int i = 0; i < kMinSignalSamples; ++i) k.Add(key, ns, /*beside=*/true);
    const KernelSignal s = k.ClosePeriod(++seq);
    PeerPeriod p = Peer(1, 0.5, 970);
    p.kernel_signal = PackKernelSignal(s);
    return p;
  };
  MpsClock m;
  ControlDecision d = m.Step(Busy({reading(150'000)}));
  ASSERT_EQ(d.rate_permille, 500u) << "a dip far under the floor: cut at once " << Trace(d);
  for (int i = 0; i < 80; ++i) {
    d = m.Step(Busy({reading(i % 2 == 0 ? 110'000 : 91'000)}));
    ASSERT_FALSE(d.probe_pause) << i;
  }
  EXPECT_EQ(d.rate_permille, 1000u) << "the job at its speed alone: the cut grown back " << Trace(d);
}

TEST(ComputeMps, ACutThatBringsTheJobToItsFloorIsHeld) {
  // Cut once: the job now reads at its floor, scattering about 0.03 either side of it (mean
  // 0.995 of the floor). Half its readings are above the floor, none by enough, over a
  // second, to say the job has room: the rate stays where the cut left it, window after
  // window, neither grown back into the shortfall nor cut further.
  MpsClock m;
  uint32_t seq = 0;
  for (uint32_t i = 1; i <= kJudgePeriods; ++i) m.Step(Busy({Kernels(850, ++seq, 970)}));
  ASSERT_EQ(m.c.rate_permille(), 500u);
  const uint32_t at_floor[kJudgePeriods] = {1000, 930, 985, 945, 990, 940, 975, 957};
  for (int window = 0; window < 20; ++window) {
    for (uint32_t speed : at_floor) {
      const ControlDecision d = m.Step(Busy({Kernels(speed, ++seq, 970)}));
      ASSERT_EQ(d.rate_permille, 500u) << window << " " << Trace(d);
    }
  }
  // With room over the floor (as fast as alone), it grows within a window.
  uint32_t periods = 0;
  while (m.c.rate_permille() == 500u && periods < 2 * kJudgePeriods) {
    m.Step(Busy({Kernels(1000, ++seq, 970)}));
    ++periods;
  }
  EXPECT_EQ(m.c.rate_permille(), 625u);
  EXPECT_LE(periods, kJudgePeriods);
}

// A job's scatter about its speed, period by period, in tenths of the scatter.
constexpr int kScatter[8] = {10, -13, 5, -8, 13, -10, 8, -5};

// A guaranteed job whose speed beside opportunistic work falls with the rate it is let run at:
// alone_permille at rate 0, cost_permille less at no limit, with a scatter about that of an
// H200's ResNet-50 beside BERT training.
struct Responsive {
  uint32_t alone_permille;
  uint32_t cost_permille;
  uint32_t scatter_permille = 0;
  uint32_t speed(uint32_t rate_permille, uint32_t seq) const {
    const int s = static_cast<int>(alone_permille - cost_permille * rate_permille / 1000) +
                  kScatter[seq % 8] * static_cast<int>(scatter_permille) / 10;
    return static_cast<uint32_t>(s);
  }
};

TEST(ComputeMps, ALowerFloorKeepsMoreOpportunisticWork) {
  // Kernels at 0.92 of alone with opportunistic work unthrottled, 1.0 without it: under a 0.97
  // floor, held back until they reach it; at 0.90, never.
  const Responsive job{.alone_permille = 1000, .cost_permille = 80};
  MpsClock strict, lax;
  for (uint32_t seq = 1; seq <= 60; ++seq) {
    strict.Step(Busy({Kernels(job.speed(strict.c.rate_permille(), seq), seq, 970)}));
    lax.Step(Busy({Kernels(job.speed(lax.c.rate_permille(), seq), seq, 900)}));
  }
  // A shortfall of a few hundredths is cut in proportion, each cut on trial: the job is brought
  // within some hundredths of its floor, as close as its readings can tell.
  EXPECT_LE(strict.c.rate_permille(), 750u);
  EXPECT_GE(job.speed(strict.c.rate_permille(), 0), 941u);
  EXPECT_EQ(lax.c.rate_permille(), 1000u);
  // Each peer against its own floor: the strictest binding one decides.
  MpsClock two;
  for (uint32_t seq = 1; seq <= 4; ++seq) {
    two.Step(Busy({Kernels(920, seq, 900, false, 1), Kernels(990, seq, 970, false, 2)}));
  }
  EXPECT_EQ(two.c.rate_permille(), 1000u);
  for (uint32_t seq = 5; seq <= 12; ++seq) {
    two.Step(Busy({Kernels(880, seq, 900, false, 1), Kernels(990, seq, 970, false, 2)}));
  }
  EXPECT_LT(two.c.rate_permille(), 1000u);
}

// A job that reads under its floor at every rate (its reference alone taken on a host that has
// since slowed): a cut buys it nothing, so it is undone, and the next waits kHoldNs, doubling.
TEST(ComputeMps, ACutThatBuysNothingIsUndoneAndTriedLessAndLessOften) {
  const Responsive job{.alone_permille = 930, .cost_permille = 0, .scatter_permille = 30};
  MpsClock m;
  std::vector<int64_t> cuts, undone;
  int at_full = 0;
  const int periods = static_cast<int>(120'000'000'000 / kControlPeriodNs);
  for (int i = 1; i <= periods; ++i) {
    const uint32_t before = m.c.rate_permille();
    const ControlDecision d = m.Step(Busy({Kernels(job.speed(before, i), i, 970)}));
    ASSERT_GE(d.rate_permille, 500u) << i << " " << Trace(d);
    if (d.rate_permille < before) cuts.push_back(m.now);
    if (d.rate_permille > before) {
      undone.push_back(m.now);
      EXPECT_NE(Trace(d).find("bought nothing"), std::string::npos) << Trace(d);
    }
    at_full += d.rate_permille == 1000u ? 1 : 0;
  }
  ASSERT_GE(cuts.size(), 3u);
  ASSERT_EQ(undone.size(), cuts.size());
  // Each cut undone a window after it; each hold twice the last, from kHoldNs.
  for (size_t k = 0; k < cuts.size(); ++k) EXPECT_EQ(undone[k] - cuts[k], kJudgePeriods * kControlPeriodNs) << k;
  for (size_t k = 1; k < cuts.size(); ++k) {
    const int64_t hold = std::min(kHoldNs << (k - 1), kMaxHoldNs);
    EXPECT_GE(cuts[k] - undone[k - 1], hold) << k;
    EXPECT_LE(cuts[k] - undone[k - 1], hold + kControlPeriodNs) << k;
  }
  EXPECT_GT(at_full, periods * 9 / 10) << "opportunistic work unthrottled 9 periods in 10";
}

// Where opportunistic work does cost the job, each cut that buys its speed back is kept, with
// the readings' scatter about them: the job is brought to its floor and held there.
TEST(ComputeMps, ACutThatBuysTheJobsSpeedBackIsKept) {
  const Responsive job{.alone_permille = 1000, .cost_permille = 240, .scatter_permille = 30};
  MpsClock m;
  double speed_sum = 0, rate_sum = 0;
  int undone = 0;
  const int periods = static_cast<int>(120'000'000'000 / kControlPeriodNs);
  for (int i = 1; i <= periods; ++i) {
    const ControlDecision d = m.Step(Busy({Kernels(job.speed(m.c.rate_permille(), i), i, 900)}));
    undone += Trace(d).find("bought nothing") != std::string::npos ? 1 : 0;
    if (i > periods / 4) {
      speed_sum += job.speed(m.c.rate_permille(), 0);
      rate_sum += m.c.rate_permille();
    }
  }
  const double n = periods - periods / 4;
  EXPECT_EQ(undone, 0);
  EXPECT_GE(speed_sum / n, 895.0) << "the job at its floor of 0.90";
  EXPECT_GE(rate_sum / n, 250.0) << "and opportunistic work let run as far as that allows";
  EXPECT_LE(rate_sum / n, 600.0);
}

TEST(ComputeMps, TheFloorIsJudgedOverAWindowNotEachPeriod) {
  // A job at 1.0 of alone with dips of two periods to 0.85 (floor 0.90): its speed over any
  // two seconds holds the floor, so nothing is held back.
  MpsClock m;
  uint32_t seq = 0;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 6; ++i) ASSERT_EQ(m.Step(Busy({Kernels(1000, ++seq, 900)})).rate_permille, 1000u);
    for (int i = 0; i < 2; ++i) {
      const ControlDecision d = m.Step(Busy({Kernels(850, ++seq, 900)}));
      ASSERT_EQ(d.rate_permille, 1000u) << round << " " << Trace(d);
    }
  }
  // Held under the floor for longer, its mean over the window goes under: cut.
  ControlDecision d;
  for (uint32_t i = 0; i < kJudgePeriods && m.c.rate_permille() == 1000u; ++i) d = m.Step(Busy({Kernels(850, ++seq, 900)}));
  EXPECT_EQ(m.c.rate_permille(), 722u) << "5.6% under: cut by 28% " << Trace(d);
}

TEST(ComputeMps, AShortfallWithinTheWindowsNoiseIsNotCut) {
  // A job at its floor whose readings scatter by about 0.03 (an H200's ResNet-50 beside BERT
  // training): its window means fall a little under the floor half the time by chance. Eight
  // readings, floor 970, mean 0.995 of it: no cut, window after window.
  const uint32_t noisy[kJudgePeriods] = {1000, 930, 985, 945, 990, 940, 975, 957};
  MpsClock m;
  uint32_t seq = 0;
  for (int window = 0; window < 20; ++window) {
    for (uint32_t speed : noisy) {
      const ControlDecision d = m.Step(Busy({Kernels(speed, ++seq, 970)}));
      ASSERT_EQ(d.rate_permille, 1000u) << window << " " << Trace(d);
    }
  }
  // The same spread 0.03 lower: under the floor by more than its noise: cut.
  ControlDecision d;
  for (uint32_t i = 0; i < 2 * kJudgePeriods && m.c.rate_permille() == 1000u; ++i) {
    d = m.Step(Busy({Kernels(noisy[i % kJudgePeriods] - 30, ++seq, 970)}));
  }
  EXPECT_EQ(m.c.rate_permille(), 878u) << "2.4% under: cut by 12% " << Trace(d);
  EXPECT_NE(Trace(d).find("at most"), std::string::npos) << Trace(d);
  // A steady shortfall of 1% (no spread): cut at the first full window.
  MpsClock steady;
  for (uint32_t i = 1; i <= kJudgePeriods; ++i) d = steady.Step(Busy({Kernels(960, i, 970)}));
  EXPECT_EQ(steady.c.rate_permille(), 948u) << Trace(d);
}

TEST(ComputeMps, ABaselineIsAskedForWithAShortPauseNotTooOften) {
  MpsClock m;
  ControlDecision d = m.Step(Busy({Kernels(0, 1, 970, /*wants_baseline=*/true)}));
  EXPECT_TRUE(d.probe_pause) << Trace(d);
  EXPECT_EQ(d.rate_permille, 1000u);
  uint32_t seq = 1;
  int pauses = 0;
  for (int i = 0; i < 4 * kMinProbeGapNs / kControlPeriodNs; ++i) {
    pauses += m.Step(Busy({Kernels(0, ++seq, 970, true)})).probe_pause ? 1 : 0;
  }
  EXPECT_EQ(pauses, 4) << "one pause per kMinProbeGapNs while a baseline is wanted";
  // Held back to nothing, the guaranteed job's kernels are never beside opportunistic work and
  // it publishes no reading: the rate grows again, and the next reading tells.
  MpsClock held;
  seq = 0;
  for (int i = 0; i < 6; ++i) held.Step(Busy({Kernels(500, ++seq, 970)}));
  EXPECT_EQ(held.c.rate_permille(), 0u);
  for (uint32_t i = 0; i + 1 < kQuietPeriods; ++i) held.Step(Busy({Kernels(0, ++seq, 970)}));
  EXPECT_EQ(held.c.rate_permille(), 0u) << "a period or three without a reading is the clocks' phase";
  held.Step(Busy({Kernels(0, ++seq, 970)}));
  EXPECT_GT(held.c.rate_permille(), 0u);
  // Guaranteed work idle: no limit, and the budget is forgotten.
  d = held.Step(Idle());
  EXPECT_EQ(d.rate_permille, 1000u);
  EXPECT_TRUE(d.forget_budget);
}

// A job read by its launches that wants time alone only to renew its references gets a pause
// while its readings are near its floor, not while they are far above it.
TEST(ComputeMps, TimeAloneToRenewReferencesIsGivenOnlyNearTheFloor) {
  const auto pauses = [](uint32_t speed_permille) {
    MpsClock m;
    int n = 0;
    for (uint32_t seq = 1; seq <= 4 * kMinProbeGapNs / kControlPeriodNs; ++seq) {
      PeerPeriod p = Kernels(0, seq, 900);
      p.kernel_signal = PackKernelSignal({.speed_permille = speed_permille, .wants_alone = true, .sequence = seq});
      const ControlDecision d = m.Step(Busy({p}));
      n += d.probe_pause ? 1 : 0;
      EXPECT_EQ(d.rate_permille, 1000u) << Trace(d);
    }
    return n;
  };
  EXPECT_EQ(pauses(950), 4) << "0.95 over a floor of 0.90: one pause per kMinProbeGapNs";
  EXPECT_EQ(pauses(1100), 1) << "1.1 over 0.90: only before the readings say so";
}

TEST(ComputeMps, ABusyStretchStartsWhereTheLastOneSettled) {
  // A GPU-bound guaranteed job (its kernels at half their speed beside unthrottled
  // opportunistic work) cuts the rate to nothing over its first periods.
  MpsClock m;
  uint32_t seq = 0;
  int ramp = 0;
  while (m.c.rate_permille() > 0 && ramp < 20) {
    m.Step(Busy({Kernels(500, ++seq, 970)}));
    ++ramp;
  }
  ASSERT_EQ(m.c.rate_permille(), 0u);
  ASSERT_GT(ramp, 3) << "each cut halves";
  // It rests for 10 s (its entry still there, its busy time 0): opportunistic work meanwhile
  // has no limit.
  ControlPeriod resting;
  resting.wanted = true;
  resting.peers[resting.count++] = Kernels(0, seq, 970);
  resting.peers[0].busy_ns = 0;
  resting.peers[0].launches = 0;
  for (int i = 0; i < 40; ++i) ASSERT_EQ(m.Step(resting).rate_permille, 1000u);
  // Back: it starts where it settled, not unthrottled.
  ControlDecision d = m.Step(Busy({Kernels(0, ++seq, 970)}));
  EXPECT_EQ(d.rate_permille, 0u) << Trace(d);
  EXPECT_NE(Trace(d).find("where it settled"), std::string::npos) << Trace(d);
  // Idle for longer than kKeepRateNs, the job that comes may be another: unthrottled.
  for (int64_t t = 0; t <= kKeepRateNs; t += kControlPeriodNs) m.Step(resting);
  d = m.Step(Busy({Kernels(0, ++seq, 970)}));
  EXPECT_EQ(d.rate_permille, 1000u) << Trace(d);
}

// A rate settled beside one guaranteed job is that job's: beside another that comes while it
// rests, opportunistic work starts unthrottled, and beside the first again, where it settled.
TEST(ComputeMps, TheRateIsSettledBesideEachGuaranteedJob) {
  // The resting job launches nothing and has no work queued, and its gate thread still
  // publishes a period's signal, with no reading, every period (gate_thread.cc).
  uint32_t rest_seq = 30000;
  const auto period = [&rest_seq](PeerPeriod strict, PeerPeriod lax, bool strict_busy) {
    PeerPeriod& resting = strict_busy ? lax : strict;
    resting.busy_ns = 0;
    resting.launches = 0;
    resting.kernel_signal = PackKernelSignal({.sequence = ++rest_seq});
    return Busy({strict, lax});
  };
  MpsClock m;
  uint32_t seq = 0, lax_seq = 0;
  // The strict job (floor 0.97) far under its floor: held back to nothing.
  for (int i = 0; i < 8; ++i) m.Step(period(Kernels(500, ++seq, 970, false, 1), Kernels(0, 0, 900, false, 2), true));
  ASSERT_EQ(m.c.rate_permille(), 0u);
  // It rests; the lax job (0.90) runs and loses nothing. Within kActiveNs of the strict job's
  // last busy period its rate still holds, then the lax job's own (none: no limit).
  ControlDecision d;
  int periods = 0;
  while (m.c.rate_permille() != 1000u && periods < 40) {
    d = m.Step(period(Kernels(0, seq, 970, false, 1), Kernels(990, ++lax_seq, 900, false, 2), false));
    ++periods;
  }
  EXPECT_EQ(m.c.rate_permille(), 1000u) << Trace(d);
  EXPECT_LE(periods, static_cast<int>(kActiveNs / kControlPeriodNs) + 1);
  EXPECT_NE(Trace(d).find("where it settled"), std::string::npos) << Trace(d);
  for (int i = 0; i < 40; ++i) {
    d = m.Step(period(Kernels(0, seq, 970, false, 1), Kernels(990, ++lax_seq, 900, false, 2), false));
    ASSERT_EQ(d.rate_permille, 1000u) << i << " " << Trace(d);
  }
  // The strict job back (the lax one resting): where it settled beside it.
  d = m.Step(period(Kernels(0, seq, 970, false, 1), Kernels(0, lax_seq, 900, false, 2), true));
  EXPECT_EQ(d.rate_permille, 0u) << Trace(d);
  // A job that made a cut and, still busy, gives no more readings (none of its kernels timed
  // beside) does not hold the rate down once another's readings grow it.
  MpsClock quiet;
  seq = 0;
  for (int i = 0; i < 8; ++i) {
    ++seq;
    quiet.Step(Busy({Kernels(1000, seq, 970, false, 1), Kernels(700, seq, 970, false, 3)}));
  }
  ASSERT_LT(quiet.c.rate_permille(), 1000u);
  int changed = 0;
  for (int i = 0; i < 80; ++i) {
    const ControlDecision q = quiet.Step(Busy({Kernels(1000, ++seq, 970, false, 1), Kernels(0, 8, 970, false, 3)}));
    changed += Trace(q).find("beside changed") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(quiet.c.rate_permille(), 1000u);
  EXPECT_EQ(changed, 0);
  // Both busy: the lower holds.
  d = m.Step(Busy({Kernels(0, seq, 970, false, 1), Kernels(0, lax_seq, 900, false, 2)}));
  EXPECT_EQ(d.rate_permille, 0u) << Trace(d);
}

// A job's first seconds: few of its kernels have a time alone, and it says so (wants a
// baseline). One reading far under its floor then is not one to halve the rate on at once (on
// an H200, ResNet-50 bf16 at 0.90 read 0.70 by seven kernels in its warm-up, the rate was
// halved, and opportunistic work harvested 0.78 of solo in that round where plain MPS, keeping
// the job at its level, harvested 0.98); the window judges it with the others, and a window
// of such readings still cuts.
TEST(ComputeMps, AReadingFarUnderFromAJobWantingABaselineIsJudgedInTheWindow) {
  MpsClock m;
  uint32_t seq = 0;
  for (int i = 0; i < 3; ++i) {
    const ControlDecision d = m.Step(Busy({Kernels(i == 1 ? 630 : 1000, ++seq, 900, /*wants_baseline=*/true)}));
    ASSERT_EQ(d.rate_permille, 1000u) << i << " " << Trace(d);
  }
  for (uint32_t i = 0; i < kJudgePeriods; ++i) m.Step(Busy({Kernels(700, ++seq, 900, /*wants_baseline=*/true)}));
  EXPECT_LT(m.c.rate_permille(), 1000u) << "a window far under its floor";
  // The same reading from a job that trusts it cuts at once.
  MpsClock sure;
  const ControlDecision d = sure.Step(Busy({Kernels(630, 1, 900)}));
  EXPECT_EQ(d.rate_permille, 500u) << Trace(d);
}

TEST(ComputeMps, APendingReadingIsWaitedForNotTakenForNoneComing) {
  // Held back to a tenth, opportunistic work is beside the guaranteed kernels too seldom for a
  // reading every period: the peer says one is pending, and the rate does not grow meanwhile.
  MpsClock m;
  uint32_t seq = 0;
  for (int i = 0; i < 4; ++i) m.Step(Busy({Kernels(500, ++seq, 970)}));
  const uint32_t held = m.c.rate_permille();
  ASSERT_LT(held, 100u);
  PeerPeriod gathering = Kernels(0, 0, 970);
  for (int i = 0; i < 3 * static_cast<int>(kQuietPeriods); ++i) {
    gathering.kernel_signal = PackKernelSignal({.pending = true, .sequence = ++seq});
    ASSERT_EQ(m.Step(Busy({gathering})).rate_permille, held) << i;
  }
  // The reading comes, under the floor: cut.
  m.Step(Busy({Kernels(600, ++seq, 970)}));
  EXPECT_LT(m.c.rate_permille(), held);
}

// Another opportunistic process runs beside the guaranteed job and takes it under its floor
// while this one rests: this one is not cut for it, and comes back where it was. Its window
// starts over: readings from before its rest are not judged with those after.
TEST(ComputeMps, AProcessIsNotCutForReadingsWhileItDoesNotLaunch) {
  MpsClock m;
  uint32_t seq = 0;
  for (int i = 0; i < 6; ++i) ASSERT_EQ(m.Step(Busy({Kernels(960, ++seq, 970)})).rate_permille, 1000u);
  ControlPeriod resting = Busy({Kernels(500, ++seq, 970)});
  resting.wanted = false;
  for (int i = 0; i < 40; ++i) {
    resting.peers[0] = Kernels(500, ++seq, 970);
    const ControlDecision d = m.Step(resting);
    ASSERT_EQ(d.rate_permille, 1000u) << i << " " << Trace(d);
  }
  // Back, and the job still under its floor beside it: cut at once (a reading 20% under).
  EXPECT_LT(m.Step(Busy({Kernels(500, ++seq, 970)})).rate_permille, 1000u);
  // Its window started over at its return: two readings just under the floor after six from
  // before the rest just under it too are not yet a window of eight.
  MpsClock w;
  seq = 0;
  for (int i = 0; i < 6; ++i) w.Step(Busy({Kernels(950, ++seq, 970)}));
  ControlPeriod away = Busy({Kernels(0, ++seq, 970)});
  away.wanted = false;
  w.Step(away);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w.Step(Busy({Kernels(950, ++seq, 970)})).rate_permille, 1000u) << i;
}

TEST(ComputeMps, AProcessThatDoesNotLaunchIsNotHeldBackSoItsRateStays) {
  // Held back to nothing beside a busy guaranteed job, the opportunistic job stops launching
  // (its input, a checkpoint): the guaranteed job publishes no reading, but nothing is held
  // back, so the rate does not grow as it would for a process kept off the GPU.
  MpsClock m;
  uint32_t seq = 0;
  for (int i = 0; i < 8; ++i) m.Step(Busy({Kernels(500, ++seq, 970)}));
  ASSERT_EQ(m.c.rate_permille(), 0u);
  ControlPeriod resting = Busy({Kernels(0, ++seq, 970)});
  resting.wanted = false;
  for (int i = 0; i < 40; ++i) ASSERT_EQ(m.Step(resting).rate_permille, 0u) << i;
  // Launching again and held back, with no reading: the rate grows as before.
  for (uint32_t i = 0; i < kQuietPeriods; ++i) m.Step(Busy({Kernels(0, ++seq, 970)}));
  EXPECT_GT(m.c.rate_permille(), 0u);
}

// A guaranteed job read by its launches (a training loop: its launches per period are its
// speed): alone_launches a period alone, cost_permille of its speed lost beside opportunistic
// work at no limit, in proportion to the rate, scattering by about scatter_permille. Its
// published readings say `reads` times what it runs at: their rate alone comes from short
// pauses on a host that moves (on an H200 ResNet-50's readings by its launches sat 0.06 over
// its speed in one call and 0.11 under it in the next).
struct Looped {
  double alone_launches = 2000;
  uint32_t cost_permille = 0;
  uint32_t scatter_permille = 20;
  double reads = 1.0;
  uint32_t floor_permille = 900;
  // Lost beside opportunistic work at any rate but in its pauses: not what holding it back
  // buys (the job's own phase, or a host too busy for both jobs' threads but in a pause).
  uint32_t fixed_permille = 0;
  uint32_t seq = 0;
  // Its speed, of alone, in the period the decision `last` governed.
  double Speed(const ControlDecision& last) const {
    return last.probe_pause ? 1.0
                            : 1.0 - fixed_permille / 1000.0 - cost_permille / 1000.0 * last.rate_permille / 1000.0;
  }
  PeerPeriod Period(const ControlDecision& last) {
    ++seq;
    const double speed = Speed(last) * (1 + kScatter[seq % 8] * static_cast<int>(scatter_permille) / 10000.0);
    PeerPeriod p = Peer(1, 0.5, floor_permille);
    p.busy_ns = kControlPeriodNs;
    p.launches = static_cast<uint64_t>(std::llround(alone_launches * speed));
    const uint32_t reading = last.probe_pause ? 0 : static_cast<uint32_t>(1000 * speed * reads);
    p.kernel_signal = PackKernelSignal({.speed_permille = reading, .by_progress = true, .sequence = seq});
    return p;
  }
};

// The job runs at 0.905 of alone beside unthrottled opportunistic work, floor 0.90: plain MPS at
// priority 1 keeps it. Its readings say 0.81 (0.90 of the floor): judged on them, opportunistic
// work was cut again and again. Judged by looks (its launches beside against its launches in a
// pause of this process, within the same two seconds), it is at its floor, and nothing is held
// back but the looks' pauses.
TEST(ComputeMps, AJobReadByItsLaunchesIsJudgedByLooksNotByItsReadings) {
  Looped job{.cost_permille = 95, .reads = 0.9};
  MpsClock m;
  ControlDecision last;
  last.rate_permille = 1000;
  int paused = 0, looks = 0;
  const int periods = static_cast<int>(120'000'000'000 / kControlPeriodNs);
  for (int i = 0; i < periods; ++i) {
    last = m.Step(Busy({job.Period(last)}));
    ASSERT_EQ(last.rate_permille, 1000u) << i << " " << Trace(last);
    paused += last.probe_pause ? 1 : 0;
    looks += Trace(last).find("a look:") != std::string::npos ? 1 : 0;
  }
  EXPECT_GE(looks, 4);
  EXPECT_GT(paused, 0);
  // A loop with no reading yet (no reference alone for its launches), its kernels reading far
  // under its floor: it is a loop, so looks judge it from its first periods, and its kernels
  // cut nothing.
  Looped fresh{.cost_permille = 95, .reads = 0.7};
  MpsClock first;
  last = {};
  last.rate_permille = 1000;
  looks = 0;
  for (int i = 0; i < 80; ++i) {
    PeerPeriod p = fresh.Period(last);
    KernelSignal s = UnpackKernelSignal(p.kernel_signal);
    s.by_progress = true;  // the loop's word, with its kernels' reading
    p.kernel_signal = PackKernelSignal(s);
    last = first.Step(Busy({p}));
    ASSERT_EQ(last.rate_permille, 1000u) << i << " " << Trace(last);
    looks += Trace(last).find("a look:") != std::string::npos ? 1 : 0;
  }
  EXPECT_GE(looks, 1);
}

// A job that holds its floor look after look is looked at less and less often, to one look
// every kFarLookGapNs; one that then falls under it is seen at the next looks and cut, and
// looked at every kLookGapNs again.
TEST(ComputeMps, LooksThinOutWhileTheJobHoldsItsFloor) {
  Looped job{.cost_permille = 95, .reads = 1.1};
  MpsClock m;
  ControlDecision last;
  last.rate_permille = 1000;
  std::vector<int> at;  // the periods looks ended in
  int paused = 0;
  const int periods = static_cast<int>(120'000'000'000 / kControlPeriodNs);
  for (int i = 0; i < periods; ++i) {
    last = m.Step(Busy({job.Period(last)}));
    ASSERT_EQ(last.rate_permille, 1000u) << i << " " << Trace(last);
    paused += last.probe_pause ? 1 : 0;
    if (Trace(last).find("a look:") != std::string::npos) at.push_back(i);
  }
  ASSERT_GE(at.size(), 4u);
  ASSERT_LE(at.size(), 6u) << "looks every kLookGapNs would be 15";
  const int far = static_cast<int>(kFarLookGapNs / kControlPeriodNs);
  EXPECT_EQ(at.back() - at[at.size() - 2], far);
  EXPECT_LT(at[1] - at[0], far);
  // Each look's pause is kLookPausePeriods: under 4% of the time.
  EXPECT_LE(paused, periods / 25);
  // Its cost a quarter: 0.75 of alone, 0.83 of its floor, its readings 0.92 (not far under, so
  // no early look). The next look sees it, the one after that cuts.
  job.cost_permille = 250;
  int cut_in = -1;
  for (int i = 0; i < periods && cut_in < 0; ++i) {
    last = m.Step(Busy({job.Period(last)}));
    if (last.rate_permille < 1000) cut_in = i;
  }
  ASSERT_GE(cut_in, 0);
  EXPECT_LE(cut_in, static_cast<int>((kFarLookGapNs + 2 * kLookGapNs) / kControlPeriodNs));
}

// The same job losing a fifth of its speed beside unthrottled opportunistic work, its readings
// saying it loses nothing: its looks see the loss, the rate is cut until they say it holds its
// floor (0.9 at half the rate), and held there.
TEST(ComputeMps, ALookThatFindsTheJobUnderItsFloorCutsUntilItHolds) {
  Looped job{.cost_permille = 200, .reads = 1.25};
  MpsClock m;
  ControlDecision last;
  last.rate_permille = 1000;
  std::vector<uint32_t> rates;
  const int periods = static_cast<int>(120'000'000'000 / kControlPeriodNs);
  for (int i = 0; i < periods; ++i) {
    last = m.Step(Busy({job.Period(last)}));
    if (i >= periods / 2 && !last.probe_pause) rates.push_back(last.rate_permille);
  }
  for (uint32_t rate : rates) {
    EXPECT_GE(rate, 350u);
    EXPECT_LE(rate, 650u) << "the job under its floor";
  }
  ControlDecision at;
  at.rate_permille = m.c.rate_permille();
  EXPECT_GE(job.Speed(at), 0.876) << m.c.rate_permille();
  // Its cost gone: its looks say it is far above its floor with confidence, and the rate
  // doubles at each, back to no limit in two looks (a quarter at a time took four).
  job.cost_permille = 0;
  int grown = 0, i = 0;
  for (; i < periods && m.c.rate_permille() < 1000; ++i) {
    last = m.Step(Busy({job.Period(last)}));
    grown += Trace(last).find("above its floor by its looks") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(m.c.rate_permille(), 1000u);
  EXPECT_LE(grown, 2) << i << " periods";
}

// A job whose looks say it is under its floor at every rate (a tenth lost beside opportunistic
// work however little of it runs): a cut is on trial, and the first look at the new rate, no
// higher, sends the rate back, with no cut on looks for a hold that doubles while cuts keep
// buying nothing. Opportunistic work runs unthrottled most of the time (on an H200, looks cut
// ResNet-50's neighbour at 0.97 from 1000 to 703 and 351 permille, the looks reading 0.94,
// 0.87 and 0.96 of the floor: nothing bought).
TEST(ComputeMps, ACutByLooksThatBuysNothingIsUndone) {
  Looped job{.cost_permille = 0, .floor_permille = 970, .fixed_permille = 100};
  MpsClock m;
  ControlDecision last;
  last.rate_permille = 1000;
  const int periods = static_cast<int>(120'000'000'000 / kControlPeriodNs);
  int unthrottled = 0, undone = 0;
  std::vector<int> cuts;
  for (int i = 0; i < periods; ++i) {
    last = m.Step(Busy({job.Period(last)}));
    unthrottled += last.rate_permille == 1000 ? 1 : 0;
    undone += Trace(last).find("bought nothing by the looks") != std::string::npos ? 1 : 0;
    if (Trace(last).find("by its looks (at most") != std::string::npos) cuts.push_back(i);
  }
  EXPECT_GE(undone, 2);
  EXPECT_GE(unthrottled, periods * 8 / 10);
  ASSERT_GE(cuts.size(), 3u);
  EXPECT_GT(cuts[2] - cuts[1], cuts[1] - cuts[0]) << "the hold doubles";
  // The same job whose loss holding back does buy: the cut is kept.
  Looped buys{.cost_permille = 100, .floor_permille = 970};
  MpsClock k;
  last = {};
  last.rate_permille = 1000;
  for (int i = 0; i < periods; ++i) last = k.Step(Busy({buys.Period(last)}));
  EXPECT_LT(k.c.rate_permille(), 600u);
}

// Where another opportunistic process runs on the GPU, a pause of this one is not time alone:
// the job is judged by its readings, as a job read by its kernels is. One that is there but
// idle is no matter.
TEST(ComputeMps, NoLookWhereAnotherOpportunisticProcessRuns) {
  Looped job{.cost_permille = 0, .scatter_permille = 0, .reads = 0.8};
  MpsClock m;
  ControlDecision last;
  last.rate_permille = 1000;
  for (uint32_t i = 0; i < kJudgePeriods; ++i) {
    ControlPeriod p = Busy({job.Period(last)}, /*opportunistic_peers=*/1);
    p.opportunistic_busy = true;
    last = m.Step(p);
    ASSERT_FALSE(last.probe_pause) << i;
  }
  EXPECT_LT(m.c.rate_permille(), 1000u) << "its readings under its floor";
  MpsClock idle_peer;
  last = {};
  last.rate_permille = 1000;
  int looks = 0;
  for (int i = 0; i < 80; ++i) {
    last = idle_peer.Step(Busy({job.Period(last)}, /*opportunistic_peers=*/1));
    looks += Trace(last).find("a look:") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(idle_peer.c.rate_permille(), 1000u);
  EXPECT_GT(looks, 0);
}

// A look needs this process launching throughout: one that stops in it is given up, and
// judges nothing.
TEST(ComputeMps, ALookIsGivenUpWhereThisProcessStopsLaunching) {
  Looped job{.cost_permille = 300};
  MpsClock m;
  ControlDecision last;
  last.rate_permille = 1000;
  int i = 0;
  while (!last.probe_pause && i++ < 40) last = m.Step(Busy({job.Period(last)}));
  ASSERT_TRUE(last.probe_pause);
  last = m.Step(Busy({job.Period(last)}));
  ASSERT_TRUE(last.probe_pause) << "a look's pause is kLookPausePeriods";
  ControlPeriod away = Busy({job.Period(last)});
  away.wanted = false;
  last = m.Step(away);
  EXPECT_FALSE(last.probe_pause);
  for (int k = 0; k < 12; ++k) {
    last = m.Step(Busy({job.Period(last)}));
    EXPECT_EQ(Trace(last).find("a look:"), std::string::npos) << k << " " << Trace(last);
    EXPECT_EQ(last.rate_permille, 1000u);
  }
}

}  // namespace
}  // namespace gslice::compute
