// The opportunistic rate controller of GPUs shared through MPS (mps_controller.h), driven
// directly with synthetic periods on simulated time: readings, windows, trials, looks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "control_periods.h"
#include "kernel_clock.h"
#include "mps_controller.h"

namespace gslice::compute {
namespace {

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
