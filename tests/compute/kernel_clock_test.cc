// A guaranteed job's kernels against themselves alone (kernel_clock.h), sample by sample on
// simulated time.
#include <gtest/gtest.h>

#include <cstdint>

#include "controller.h"
#include "kernel_clock.h"

namespace gslice::compute {
namespace {

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

}  // namespace
}  // namespace gslice::compute
