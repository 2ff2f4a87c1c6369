// The launch gate's pure rules: policy parsing, the GCRA cap, share turns, depth bound.
#include "policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <vector>

namespace gslice::compute {
namespace {

TEST(ComputePolicy, ParsesCapShareAndClass) {
  ComputePolicy p;
  char err[128] = {};
  ASSERT_TRUE(ParseComputePolicy("30%", "70%", "opportunistic", &p, err, sizeof err)) << err;
  EXPECT_EQ(p.cap_permille, 300u);
  EXPECT_EQ(p.share_permille, 700u);
  EXPECT_TRUE(p.share_set);
  EXPECT_EQ(p.cls, ComputeClass::kOpportunistic);
  ASSERT_TRUE(ParseComputePolicy("", "", "", &p, err, sizeof err));
  EXPECT_FALSE(p.capped());
  EXPECT_FALSE(p.share_set);
  EXPECT_EQ(p.cls, ComputeClass::kGuaranteed);
}

TEST(ComputePolicy, RejectsBadValuesWithTheVariableName) {
  ComputePolicy p;
  p.cap_permille = 123;
  char err[128] = {};
  EXPECT_FALSE(ParseComputePolicy("150%", "", "", &p, err, sizeof err));
  EXPECT_NE(std::string(err).find("GSLICE_COMPUTE"), std::string::npos) << err;
  EXPECT_FALSE(ParseComputePolicy("0.5%", "", "", &p, err, sizeof err));
  EXPECT_FALSE(ParseComputePolicy("", "lots", "", &p, err, sizeof err));
  EXPECT_NE(std::string(err).find("GSLICE_SHARE"), std::string::npos) << err;
  EXPECT_FALSE(ParseComputePolicy("", "", "best-effort", &p, err, sizeof err));
  EXPECT_NE(std::string(err).find("GSLICE_CLASS"), std::string::npos) << err;
  EXPECT_EQ(p.cap_permille, 123u) << "a refused policy leaves the old one";
}

// Simulates a job that always has work, under a GCRA cap, with 1 ms kernels whose time is
// charged when they complete: the busy fraction over any 1 s window stays at the cap.
TEST(ComputeGcra, HoldsTheCapOverEveryWindow) {
  for (uint32_t cap : {100u, 300u, 500u, 700u}) {
    std::atomic<int64_t> tat{0};
    const int64_t kernel = 1'000'000, horizon = 5'000'000'000;
    std::vector<int64_t> busy_ms(static_cast<size_t>(horizon / 1'000'000), 0);
    int64_t now = 0;
    while (now < horizon) {
      const int64_t wait = GcraWaitNs(tat.load(), now);
      if (wait > 0) {
        now += wait;
        continue;
      }
      for (int64_t t = now; t < now + kernel && t < horizon; t += 1'000'000) busy_ms[static_cast<size_t>(t / 1'000'000)] = 1;
      now += kernel;
      GcraCharge(tat, now, kernel, cap);
    }
    int64_t worst = 0, total = 0;
    for (size_t s = 0; s + 1000 <= busy_ms.size(); ++s) {
      int64_t w = 0;
      for (size_t i = s; i < s + 1000; ++i) w += busy_ms[i];
      worst = std::max(worst, w);
    }
    for (int64_t b : busy_ms) total += b;
    EXPECT_NEAR(static_cast<double>(total) / 5000.0, cap / 1000.0, 0.01) << "cap " << cap;
    // Over any 1 s window: at most cap * (1 s + tolerance) + one kernel.
    EXPECT_LE(worst, static_cast<int64_t>(cap) + static_cast<int64_t>(cap) * kCapToleranceNs / 1'000'000'000 + 1)
        << "cap " << cap;
  }
}

TEST(ComputeGcra, DoesNotBankIdleTime) {
  std::atomic<int64_t> tat{0};
  GcraCharge(tat, 0, 1'000'000, 500);
  // A long idle stretch: the next charge starts from now - tolerance, not from the past.
  const int64_t now = 10'000'000'000;
  GcraCharge(tat, now, 1'000'000, 500);
  EXPECT_EQ(tat.load(), now - kCapToleranceNs + 2'000'000);
  EXPECT_EQ(GcraWaitNs(tat.load(), now), 0);
}

// Two always-busy slices with shares 1:3 taking turns by virtual time get 1:3 of the time.
TEST(ComputeShares, TurnsFollowTheShares) {
  struct S {
    int64_t vtime = 0;
    bool running = false;
    int64_t busy = 0;
    uint32_t share;
  } s[2];
  s[0].share = 250;
  s[1].share = 750;
  for (int step = 0; step < 100000; ++step) {
    for (int i = 0; i < 2; ++i) {
      S& me = s[i];
      const S& other = s[1 - i];
      if (!ShareTurn(me.vtime, other.vtime, me.running, other.running)) {
        me.running = false;
        continue;
      }
      me.running = true;
      me.busy += 100'000;
      me.vtime += VtimeIncrement(100'000, me.share);
      break;  // one 100 us kernel per step: exclusive use of the device
    }
  }
  const double frac = static_cast<double>(s[0].busy) / static_cast<double>(s[0].busy + s[1].busy);
  EXPECT_NEAR(frac, 0.25, 0.01);
}

TEST(ComputeShares, ActivationCatchesUpButNeverGoesBack) {
  EXPECT_EQ(VtimeOnActivation(5, 100), 100);
  EXPECT_EQ(VtimeOnActivation(500, 100), 500);
  EXPECT_EQ(VtimeOnActivation(5, INT64_MAX), 5);
  EXPECT_TRUE(ShareTurn(10, INT64_MAX, false, false));
  EXPECT_FALSE(ShareTurn(10, 20, false, true)) << "behind, but the other holds the turn";
  EXPECT_TRUE(ShareTurn(10, 20, false, false));
  EXPECT_TRUE(ShareTurn(20 + kShareQuantumNs, 20, true, false));
  EXPECT_FALSE(ShareTurn(21 + kShareQuantumNs, 20, true, false));
}

TEST(ComputeDepth, BoundsQueuedWorkButAlwaysAllowsOne) {
  EXPECT_TRUE(DepthAllows(0, 50'000'000, kCapDepthNs));
  EXPECT_FALSE(DepthAllows(1, 50'000'000, kCapDepthNs));
  EXPECT_TRUE(DepthAllows(19, 100'000, kCapDepthNs));
  EXPECT_FALSE(DepthAllows(20, 100'000, kCapDepthNs));
}

}  // namespace
}  // namespace gslice::compute

namespace gslice::compute {
namespace {

// The time-sliced controller's steps without its waits (each step taken at once).
constexpr ControllerTuning kNoWait = [] {
  ControllerTuning t = kTimeSlicedTuning;
  t.hold_periods = 0;
  t.backoff = false;
  return t;
}();

TEST(ComputeController, AdditiveIncreaseWhileGuaranteedHoldsHalvesWhenItDrops) {
  using L = OpportunisticLevel;
  EXPECT_EQ(NextOpportunisticLevel(L{0, 0}, 100.0, 100.0, kNoWait), (L{kRateStepPermille, 0}));
  EXPECT_EQ(NextOpportunisticLevel(L{200, 0}, 98.0, 100.0, kNoWait), (L{200 + kRateStepPermille, 0}));
  EXPECT_EQ(NextOpportunisticLevel(L{200, 0}, 96.0, 100.0, kNoWait), (L{100, 0}));
  EXPECT_EQ(NextOpportunisticLevel(L{15, 0}, 50.0, 100.0, kNoWait), (L{0, 0})) << "small rates go to zero";
  EXPECT_EQ(NextOpportunisticLevel(L{990, 0}, 100.0, 100.0, kNoWait), (L{1000, 0}));
  EXPECT_EQ(NextOpportunisticLevel(L{500, 0}, 100.0, 0.0, kNoWait), (L{500 + kRateStepPermille, 0})) << "no baseline yet";
  // Against a guaranteed job that loses 1% of its progress per 10% of opportunistic share,
  // the controller saws around the 30% the floor allows: guaranteed progress averages at
  // the floor, and never falls more than one step below it.
  L l;
  double sum = 0, worst = 100.0;
  const int periods = 400;
  for (int period = 0; period < periods; ++period) {
    const double progress = 100.0 * (1.0 - 0.1 * l.rate_permille / 1000.0);
    if (period >= 20) {
      sum += progress;
      worst = std::min(worst, progress);
    }
    l = NextOpportunisticLevel(l, progress, 100.0, kNoWait);
    EXPECT_EQ(l.gap_ns, 0) << "the rate alone holds this job";
  }
  EXPECT_GE(sum / (periods - 20), kGuaranteedFloor * 100.0 - 0.5);
  EXPECT_GE(worst, kGuaranteedFloor * 100.0 - 0.1 * kRateStepPermille / 10.0 - 1e-9);
  EXPECT_GE(l.rate_permille, 100u);
  EXPECT_LE(l.rate_permille, 350u);
}

TEST(ComputeController, OnMpsTheCostIsTheMedianLossPerExposure) {
  LossEstimate e;
  EXPECT_LT(e.PerExposure(), 0) << "nothing known";
  EXPECT_EQ(RateForLoss(e.PerExposure(), 0), 1000u) << "nothing known: no limit";
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
  // Dropped (its baseline was stale), the sample no longer counts.
  e.DropNewest();
  EXPECT_EQ(e.count(), 3);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.05);
  // Once the oldest samples have been replaced too: kLossSamples samples of 0.1 push out the
  // three above, one of 0.9 is dropped again, and what is left is the newest seven.
  for (int i = 0; i < kLossSamples; ++i) e.Add(0.1, 1.0);
  e.Add(0.9, 1.0);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.1);
  e.DropNewest();
  EXPECT_EQ(e.count(), kLossSamples - 1);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.1);
  e.Add(0.02, 1.0);
  e.Add(0.02, 1.0);
  e.Add(0.02, 1.0);
  e.Add(0.02, 1.0);
  EXPECT_EQ(e.count(), kLossSamples);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.06) << "four samples of 0.1 left and four of 0.02: the middle";
  e.Add(0.02, 1.0);
  EXPECT_DOUBLE_EQ(e.PerExposure(), 0.02) << "the oldest 0.1 replaced";
  e.Clear();
  e.Add(0.06, 1.0);
  // The rate whose exposure costs 3%: half at 6% per unit; the other opportunistic process
  // takes as much.
  EXPECT_EQ(RateForLoss(0.06, 0), 500u);
  EXPECT_EQ(RateForLoss(0.06, 1), 250u);
  EXPECT_EQ(RateForLoss(1 - kGuaranteedFloor, 0), 1000u);
  // Only the newest kLossSamples count; a job faster beside the work lost nothing.
  for (int i = 0; i < kLossSamples; ++i) e.Add(-0.02, 1.0);
  EXPECT_EQ(e.count(), kLossSamples);
  EXPECT_EQ(e.PerExposure(), 0);
  e.Clear();
  EXPECT_LT(e.PerExposure(), 0);
  // After a pair: the estimate's rate where the pair was sampled; otherwise only growing
  // towards it (5 points and a quarter), or down to it at once.
  e.Add(0.06, 1.0);
  EXPECT_EQ(NextSpatialRate(900, e, true, 0), 500u);
  EXPECT_EQ(NextSpatialRate(100, e, true, 0), 500u);
  EXPECT_EQ(NextSpatialRate(100, e, false, 0), 100u + kSpatialTuning.step_permille + 25);
  EXPECT_EQ(NextSpatialRate(480, e, false, 0), 500u);
  EXPECT_EQ(NextSpatialRate(900, e, false, 0), 500u);
  // A cut between probes: to a quarter, small rates to 0.
  EXPECT_EQ(SpatialCut(1000), 250u);
  EXPECT_EQ(SpatialCut(30), 0u);
}

// The gate's MPS schedule (launch_gate.cc, ControlOpportunisticRate) on a model host: 250 ms
// periods; a probe of kSpatialTuning.probe_periods every 6 s with opportunistic work paused;
// each probe paired with the kPairPeriods periods on either side of it; kPairPeriods periods
// in a row each below kSpatialCutBelow cut at once and bring the probe forward (1 s).
// The guaranteed job's speed drifts with the host (a log-normal AR(1) with 5% spread whose
// correlation halves in about 1.2 s) and carries 6% of white noise per period, and one
// period in twenty it stalls to 0.4 of its speed (in a probe, its pair then reads it 2.5x
// faster); opportunistic work at exposure x costs it l x. Returns the job's mean true speed
// (1 - l x; probes at 1) and the mean rate over `periods`.
struct MpsModel {
  double speed = 0, rate = 0;
  double late_rate = 0;  // the mean rate over the second half of the periods
};
struct MpsHost {
  // The job starts with the controller, and until the first probe ends (its warm-up) it
  // reads 0.3 of its speed.
  bool warm_up = false;
  // The kPairPeriods periods after the first probe read 0.3 of the job's speed (a moment of
  // the host), so the first pair samples a cost many times the true one.
  bool slow_first_pair = false;
  // A pair, or kPairPeriods periods in a row between probes, that read the job faster than
  // kStaleBaselineAbove make the job probed again at once, the pair's sample dropped, as the
  // gate does.
  bool drop_stale = true;
};
MpsModel RunMpsModel(double l, unsigned seed, int periods = 2400, MpsHost h = {}) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> drift(0, 0.05 * std::sqrt(1 - 0.87 * 0.87)), white(0, 0.06);
  std::uniform_int_distribution<int> stalls(0, 19);
  const int every = static_cast<int>(kSpatialTuning.probe_every_ns / kControlPeriodNs);
  const int soon = static_cast<int>(kSpatialTuning.reprobe_after_cut_ns / kControlPeriodNs);
  double host = 0, base = 0, before = 0, after = 0, true_sum = 0, rate_sum = 0, late_sum = 0;
  uint32_t rate = kSpatialTuning.start_permille;
  LossEstimate estimate;
  std::vector<double> recent;
  int since = every, probe_left = 0, pair_left = 0, n_before = 0, pairs = 0;
  bool pair_sampled = false;
  for (int period = 0; period < periods; ++period) {
    host = 0.87 * host + drift(rng);
    const bool probing = probe_left > 0;
    const double x = probing ? 0 : rate / 1000.0;
    const double truth = 1 - l * x;
    // One period in twenty the job stalls (a host hiccup): it reads 0.4 of its speed.
    const bool slow = (h.warm_up && period <= static_cast<int>(kSpatialTuning.probe_periods)) ||
                      (h.slow_first_pair && pairs == 0 && pair_left > 0);
    const double stall = slow ? 0.3 : stalls(rng) == 0 ? 0.4 : 1.0;
    const double reading = std::exp(host) * truth * (1 + white(rng)) * stall;
    true_sum += truth;
    rate_sum += x;
    if (period >= periods / 2) late_sum += x;


    ++since;
    if (probing) {
      base += reading / kSpatialTuning.probe_periods;
      if (--probe_left == 0) pair_left = kPairPeriods;
      continue;
    }
    recent.push_back(reading);
    if (recent.size() > kPairPeriods) recent.erase(recent.begin());
    if (pair_left > 0) {
      after += reading;
      if (--pair_left == 0) {
        const double speed = (before + after) / (n_before + kPairPeriods) / base;
        recent.clear();
        pair_sampled = false;
        ++pairs;
        if (h.drop_stale && PairSaysBaselineStale(speed)) {
          since = every;
          continue;
        }
        pair_sampled = estimate.Add(1 - speed, x);
        rate = NextSpatialRate(rate, estimate, pair_sampled, 0);
      }
      continue;
    }
    if (since >= every) {
      before = 0;
      for (double v : recent) before += v;
      n_before = static_cast<int>(recent.size());
      after = base = 0;
      since = 0;
      probe_left = static_cast<int>(kSpatialTuning.probe_periods);
      continue;
    }
    if (recent.size() == kPairPeriods && std::max(recent[0], recent[1]) / base < kSpatialCutBelow) {
      rate = SpatialCut(rate);
      recent.clear();
      since = std::max(since, every - soon);
    } else if (h.drop_stale && recent.size() == kPairPeriods && PairSaysBaselineStale(std::min(recent[0], recent[1]) / base)) {
      if (pair_sampled) estimate.DropNewest();
      pair_sampled = false;
      recent.clear();
      since = every;
    }
  }
  return {true_sum / periods, rate_sum / periods, late_sum / (periods - periods / 2)};
}

TEST(ComputeController, OnMpsPairedProbesTellTheCostFromTheHostsDrift) {
  // Averaged over eight hosts. Harmless work keeps most of its rate (the probes take 8%); work
  // that costs the job up to 30% at the full rate is held where the job keeps its floor, give
  // or take the estimate's spread.
  for (double l : {0.0, 0.02, 0.05, 0.10, 0.30, 0.60}) {
    double speed = 0, rate = 0;
    for (unsigned seed = 1; seed <= 8; ++seed) {
      const MpsModel m = RunMpsModel(l, seed);
      speed += m.speed / 8;
      rate += m.rate / 8;
    }
    SCOPED_TRACE(testing::Message() << "loss at the full rate " << l << ": speed " << speed << ", rate " << rate);
    EXPECT_GE(speed, kGuaranteedFloor - 0.006);
    if (l <= 0.02) {
      EXPECT_GE(rate, 0.6) << "the drift and the stalls alone must not cost harmless work its rate";
    } else {
      EXPECT_GE(rate, 0.5 * (1 - kGuaranteedFloor) / l) << "nor hold it far below what the floor allows";
    }
  }
}

// One pair that a moment of the host made read the job at a fraction of its speed samples a
// cost many times the true one, and the rate it sets is too low for later pairs to reach
// kMinExposure. Kept as the estimate's only sample, it would hold the rate there for good
// (about 65 permille here). Until the estimate has kTrustedSamples samples the rate stays at
// least kExplorePermille, so the next two pairs are samples of their own and outvote it
// within seconds; later, a sample like it is one of several, and pairs under kMinExposure
// are pooled until they weigh as one. Over the second half of twenty minutes the rate comes
// within a fifth of the same hosts' without that pair, and the job keeps its floor.
struct SlowFirstPair {
  double clean_rate = 0, slow_rate = 0;  // with no slow first pair, and with one
  double slow_speed = 0;                 // the job's, with one
};
// Over eight hosts and `periods`: the rate over the whole run, or over its second half (late).
SlowFirstPair RunSlowFirstPair(double l, int periods, bool late) {
  SlowFirstPair r;
  for (unsigned seed = 1; seed <= 8; ++seed) {
    const MpsModel clean = RunMpsModel(l, seed, periods);
    const MpsModel slow = RunMpsModel(l, seed, periods, {.slow_first_pair = true});
    r.clean_rate += (late ? clean.late_rate : clean.rate) / 8;
    r.slow_rate += (late ? slow.late_rate : slow.rate) / 8;
    r.slow_speed += slow.speed / 8;
  }
  return r;
}

TEST(ComputeController, OnMpsOneBadFirstSampleDoesNotHoldTheRateDown) {
  // The first two minutes: with the floor, 0.571 and 0.373 against 0.817 and 0.602 with no
  // slow pair, where the pool alone got 0.443 and 0.250; the job beside work costing 5%
  // keeps 0.981 (0.988 with the pool alone). Where the work costs 30-60%, the floor's pairs
  // cost the job 0.6-0.7 points over the first two minutes (0.966 and 0.961, against 0.973
  // and 0.966) and 0.2-0.3 over ten (0.974 and 0.969, against 0.977 and 0.971).
  struct Span {
    int periods;
    bool late;         // judged by the second half's rate, else the whole run's
    double at_least;   // of the rate with no slow pair
    const char* what;
  };
  const Span spans[] = {
      {static_cast<int>(1'200'000'000'000 / kControlPeriodNs), true, 0.8, "the second half's rate"},
      {static_cast<int>(120'000'000'000 / kControlPeriodNs), false, 0.6, "the first two minutes' rate"}};
  for (const Span& span : spans) {
    for (double l : {0.0, 0.05}) {
      const SlowFirstPair m = RunSlowFirstPair(l, span.periods, span.late);
      SCOPED_TRACE(testing::Message() << "loss at the full rate " << l << ": " << span.what << " " << m.clean_rate
                                      << " with no slow pair, " << m.slow_rate << " with one; speed " << m.slow_speed);
      EXPECT_GE(m.slow_rate, span.at_least * m.clean_rate);
      EXPECT_GE(m.slow_speed, kGuaranteedFloor - 0.006);
    }
  }
  // The floor: only while the estimate has some samples and fewer than kTrustedSamples, and
  // shared with the other opportunistic processes.
  LossEstimate f;
  EXPECT_EQ(EstimateRate(f, 0), 1000u) << "nothing known: no limit";
  EXPECT_TRUE(f.Add(0.5, 0.8));  // 0.625 per exposure: RateForLoss gives 48
  EXPECT_EQ(RateForLoss(f.PerExposure(), 0), 48u);
  EXPECT_EQ(EstimateRate(f, 0), kExplorePermille);
  EXPECT_EQ(EstimateRate(f, 1), kExplorePermille / 2);
  EXPECT_TRUE(f.Add(0.5, 0.8));
  EXPECT_EQ(EstimateRate(f, 0), kExplorePermille);
  EXPECT_TRUE(f.Add(0.5, 0.8));
  EXPECT_EQ(EstimateRate(f, 0), 48u) << "three samples: the estimate decides alone";
  EXPECT_EQ(NextSpatialRate(kExplorePermille, f, true, 0), 48u);
  LossEstimate cheap;
  EXPECT_TRUE(cheap.Add(0.01, 0.5));
  EXPECT_EQ(EstimateRate(cheap, 0), 1000u) << "a floor, not a limit";
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
  EXPECT_DOUBLE_EQ(e.PerExposure(), (0.2 + 0.1) / 2) << "the pool's 0.005 loss at 0.05 exposure, and the first";
  EXPECT_FALSE(e.Add(0.01, 0.05));
  EXPECT_TRUE(e.Add(0.3, 1.0)) << "a pair of enough exposure supersedes the pool";
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(e.Add(0.01, 0.05)) << "the pool starts again: " << i;
  EXPECT_EQ(e.pooled(), 3);
  EXPECT_EQ(e.count(), 3);
  e.Clear();
  EXPECT_EQ(e.pooled(), 0);
}

// The first probe of a run catches the guaranteed job warming up (on H100s its pair then read
// it 2.6-3.5x faster). Taken as a sample of no loss, that pair holds the rate high while the
// estimate has few other samples; dropped, with the job probed again, it costs nothing.
TEST(ComputeController, OnMpsAProbeOfAWarmingUpJobIsProbedAgain) {
  EXPECT_FALSE(PairSaysBaselineStale(1.31)) << "the fastest ordinary pair on an H100";
  EXPECT_FALSE(PairSaysBaselineStale(1.43)) << "a stall in one of the probe's two periods";
  EXPECT_TRUE(PairSaysBaselineStale(2.6)) << "a probe of a job warming up";
  // The first minute of a job that warms up through the first probe (at 0.3 of its speed),
  // averaged over eight hosts, against the same hosts with no warm-up. Where the work costs
  // the job 20-30% at the full rate, the warm-up's pair reads over 2x: dropped, with the job
  // probed again, it costs the job about a second at the full rate; kept, as a sample of no
  // loss, it costs far more. (At a 10% cost the first minute is decided by the estimate's
  // first samples either way; at 50% the stale pair reads under 2x and is kept.)
  const int minute = static_cast<int>(60'000'000'000 / kControlPeriodNs);
  for (double l : {0.20, 0.30}) {
    double clean = 0, dropped = 0, kept = 0;
    for (unsigned seed = 1; seed <= 8; ++seed) {
      clean += RunMpsModel(l, seed, minute).speed / 8;
      dropped += RunMpsModel(l, seed, minute, {.warm_up = true}).speed / 8;
      kept += RunMpsModel(l, seed, minute, {.warm_up = true, .drop_stale = false}).speed / 8;
    }
    SCOPED_TRACE(testing::Message() << "loss at the full rate " << l << ": the first minute's speed " << clean
                                    << " with no warm-up; with one, " << dropped << " (stale pair dropped), " << kept
                                    << " (kept)");
    EXPECT_GE(dropped, clean - 0.015);
    EXPECT_GT(dropped, kept + 0.015);
  }
}

TEST(ComputeController, AtRateZeroStaysOutOfShortGapsUntilGuaranteedWorkHolds) {
  using L = OpportunisticLevel;
  // Below the floor at rate 0: the gap level doubles from 1 ms up to kMaxGapNs.
  L l{0, 0};
  std::vector<int64_t> gaps;
  for (int i = 0; i < 7; ++i) {
    l = NextOpportunisticLevel(l, 90.0, 100.0, kNoWait);
    gaps.push_back(l.gap_ns);
    EXPECT_EQ(l.rate_permille, 0u);
  }
  EXPECT_EQ(gaps, (std::vector<int64_t>{1'000'000, 2'000'000, 4'000'000, 8'000'000, 16'000'000, kMaxGapNs, kMaxGapNs}));
  // Holding again: the gap shrinks 1 ms per period before any rate is given back.
  l = NextOpportunisticLevel(L{0, 3'000'000}, 99.0, 100.0, kNoWait);
  EXPECT_EQ(l, (L{0, 2'000'000}));
  l = NextOpportunisticLevel(L{0, 500'000}, 99.0, 100.0, kNoWait);
  EXPECT_EQ(l, (L{0, 0}));
  // A job that time-slicing slows by gaps: entering gaps shorter than 6 ms costs it 5%,
  // longer ones 1%. The controller settles with a gap level that keeps it at the floor or
  // within one step of it, and spends most periods at or above the floor.
  auto progress_of = [](const L& x) { return x.rate_permille > 0 ? 90.0 : (x.gap_ns < 6'000'000 ? 95.0 : 99.0); };
  l = L{};
  int below = 0;
  for (int period = 0; period < 400; ++period) {
    const double p = progress_of(l);
    if (period >= 40 && p < kGuaranteedFloor * 100.0) ++below;
    l = NextOpportunisticLevel(l, p, 100.0, kNoWait);
  }
  EXPECT_LT(below, 360 / 3) << "below the floor in " << below << " of 360 periods";
  EXPECT_EQ(l.rate_permille, 0u);
}

// Time-sliced, a busy period starts at gap 4 ms and steps towards more sharing only after
// the job held for hold_periods; each shortfall doubles that wait, up to kMaxHoldPeriods.
// Against a job that entering gaps under 1 ms costs 5% (the H100 trace's case), the first
// shortfall comes after four steps of a second each, and then ever more rarely.
TEST(ComputeController, TimeSlicedWaitsLongerAfterEveryShortfall) {
  using L = OpportunisticLevel;
  L l{kTimeSlicedTuning.start_permille, kTimeSlicedTuning.start_gap_ns, 0, kTimeSlicedTuning.hold_periods};
  std::vector<int> shortfalls;
  for (int period = 0; period < 400; ++period) {
    const double p = l.rate_permille > 0 || l.gap_ns < 1'000'000 ? 95.0 : 100.0;
    if (p < kGuaranteedFloor * 100.0) shortfalls.push_back(period);
    l = NextOpportunisticLevel(l, p, 100.0);
    EXPECT_LE(l.hold, kMaxHoldPeriods);
  }
  ASSERT_GE(shortfalls.size(), 3u);
  EXPECT_EQ(shortfalls[0], 16) << "four steps of 1 ms, each after 4 periods that held";
  EXPECT_EQ(shortfalls[1] - shortfalls[0], 9) << "then the wait doubles to 8 periods";
  EXPECT_EQ(shortfalls[2] - shortfalls[1], 17) << "and to the most, 16";
  EXPECT_LE(shortfalls.size(), 3u + (400u - 43u) / 17u + 1u) << "one shortfall per 17 periods from then on";
  EXPECT_EQ(l.rate_permille, 0u);
  // Without waits the same job would fall short every other period.
  l = L{};
  int no_wait = 0;
  for (int period = 0; period < 400; ++period) {
    const double p = l.rate_permille > 0 || l.gap_ns < 1'000'000 ? 95.0 : 100.0;
    if (p < kGuaranteedFloor * 100.0) ++no_wait;
    l = NextOpportunisticLevel(l, p, 100.0, kNoWait);
  }
  EXPECT_GE(no_wait, 150);
}

TEST(ComputeController, JudgesSpeedWhileBusyNotLaunchRate) {
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

TEST(ComputeController, ARequestDrivenServerIsJudgedByItsSpeedNotItsArrivals) {
  // A server at about half load: Poisson arrivals, 14 requests a period on average, each
  // 120 launches and 8.6 ms of GPU time. Opportunistic work in its gaps costs it 1% (below
  // the floor's 3%): only a real slowdown should make the controller back off.
  constexpr double kRequestNs = 8.6e6, kLaunches = 120;
  const auto run = [&](bool by_speed, double cost, int* shortfalls, int64_t* max_gap) {
    std::mt19937 rng(7);
    std::poisson_distribution<int> arrivals(14.0);
    OpportunisticLevel l{kTimeSlicedTuning.start_permille, kTimeSlicedTuning.start_gap_ns, 0,
                         kTimeSlicedTuning.hold_periods};
    *shortfalls = 0;
    *max_gap = 0;
    for (int period = 0; period < 400; ++period) {
      const bool sharing = l.rate_permille > 0 || l.gap_ns < 4'000'000;
      const int requests = arrivals(rng);
      GuaranteedPeriod p{static_cast<uint64_t>(requests * kLaunches),
                         static_cast<int64_t>(requests * kRequestNs * (sharing ? 1 + cost : 1.0)), kLaunches / kRequestNs};
      // The launch-rate judgement compares launches with the mean period's.
      const double progress = by_speed ? GuaranteedSpeed(&p, 1) : static_cast<double>(p.launches) / (14.0 * kLaunches);
      if (progress < 0) continue;
      if (progress < kGuaranteedFloor) ++*shortfalls;
      l = NextOpportunisticLevel(l, progress, 1.0);
      *max_gap = std::max(*max_gap, l.gap_ns);
    }
    return l;
  };
  int shortfalls = 0;
  int64_t max_gap = 0;
  OpportunisticLevel l = run(true, 0.01, &shortfalls, &max_gap);
  EXPECT_EQ(shortfalls, 0);
  EXPECT_EQ(l.gap_ns, 0);
  EXPECT_GT(l.rate_permille, 0u) << "it shares more and more while the server keeps its speed";
  l = run(false, 0.01, &shortfalls, &max_gap);
  EXPECT_GE(shortfalls, 40) << "judged by launches, the arrivals' noise reads as shortfalls";
  EXPECT_EQ(max_gap, kMaxGapNs);
  // A real slowdown (10% while sharing) is still seen.
  l = run(true, 0.10, &shortfalls, &max_gap);
  EXPECT_GE(shortfalls, 3);
  EXPECT_EQ(l.rate_permille, 0u);
  EXPECT_GT(l.gap_ns, 0);
}

TEST(ComputeController, OverlapBoundsTheLossWithoutABaseline) {
  GuaranteedPeriod jobs[2] = {{500, 150'000'000, 0, 3'000'000}, {20, 50'000'000, 0, 1'000'000}};
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 0), 1 - 4e6 / 200e6);
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 1), 1 - 8e6 / 200e6) << "another opportunistic process counts as much";
  jobs[0].overlap_ns = 200'000'000;
  EXPECT_DOUBLE_EQ(OverlapSpeed(jobs, 2, 0), 0);
  GuaranteedPeriod idle[1] = {{10, kMinJudgedBusyNs - 1, 0, 0}};
  EXPECT_LT(OverlapSpeed(idle, 1, 0), 0) << "too little busy time to judge";
}

TEST(ComputeController, OnMpsAReadingTheOverlapCannotExplainIsNoise) {
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
  job.overlap_ns = 400'000'000;
  EXPECT_DOUBLE_EQ(SpatialSpeed(&job, 1, 0), 0.8);
  // Jobs without a baseline are left out of both, as in GuaranteedSpeed.
  GuaranteedPeriod two[2] = {{1000, 200'000'000, kBase, 0}, {50, 100'000'000, 0, 100'000'000}};
  EXPECT_DOUBLE_EQ(SpatialSpeed(two, 2, 0), 1.0);
  two[0].base_per_ns = 0;
  EXPECT_LT(SpatialSpeed(two, 2, 0), 0) << "no job with a baseline: nothing to judge";
}

TEST(ComputeController, OnATimeSlicedGpuTheJobsOwnNoiseDoesNotMoveTheController) {
  // A guaranteed job whose own speed moves by up to 20% from one period to the next (a busy
  // host), beside opportunistic work whose cost is the time both had work queued: 8% of the
  // job's busy time with gap 0, falling as the gap grows (fewer of its idle stretches are
  // entered), plus the rate. The overlap sees only that cost; the speed against a baseline
  // sees the noise as well.
  const auto overlap_at = [](const OpportunisticLevel& l) {
    return 0.08 * std::exp(-static_cast<double>(l.gap_ns) / 10e6) + l.rate_permille / 1000.0;
  };
  const auto run = [&](bool by_overlap, int* shortfalls, double* mean_gap_ms) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> noise(0.8, 1.2);
    OpportunisticLevel l{kTimeSlicedTuning.start_permille, kTimeSlicedTuning.start_gap_ns, 0,
                         kTimeSlicedTuning.hold_periods};
    *shortfalls = 0;
    double gap_sum = 0;
    for (int period = 0; period < 400; ++period) {
      const double busy = 200e6;
      GuaranteedPeriod p{0, static_cast<int64_t>(busy), 0, static_cast<int64_t>(busy * overlap_at(l))};
      const double speed = by_overlap ? OverlapSpeed(&p, 1, 0) : (1 - overlap_at(l)) * noise(rng);
      if (speed < kGuaranteedFloor) ++*shortfalls;
      l = NextOpportunisticLevel(l, speed, 1.0);
      gap_sum += static_cast<double>(l.gap_ns) / 1e6;
    }
    *mean_gap_ms = gap_sum / 400;
    return l;
  };
  int shortfalls = 0;
  double overlap_gap = 0, noisy_gap = 0;
  OpportunisticLevel l = run(true, &shortfalls, &overlap_gap);
  // It settles where the cost holds (gap >= 10 ms: 8% x e^-1 < 3%), testing the next step
  // down now and then, each test waiting longer.
  EXPECT_LE(shortfalls, 3 + 400 / 17) << "at most one shortfall per longest wait once settled";
  EXPECT_GE(l.gap_ns, 9'000'000);
  EXPECT_LE(overlap_gap, 16.0);
  run(false, &shortfalls, &noisy_gap);
  EXPECT_GE(shortfalls, 100) << "the noise alone falls below the floor in a good share of periods";
  EXPECT_GT(noisy_gap, overlap_gap + 2.0) << "and keeps the controller further out of the gaps";
}

}  // namespace
}  // namespace gslice::compute
