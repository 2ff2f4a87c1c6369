// How a guaranteed job's progress is read from its launches and its host's waits
// (progress_clock.h), pass by pass on simulated time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "controller.h"
#include "progress_clock.h"

namespace gslice::compute {
namespace {

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

}  // namespace
}  // namespace gslice::compute
