// Compute policy of one process (cap, share, class) and the pure decisions the launch gate
// makes from it: no driver calls, no clocks of its own, so the rules are unit-testable.
// docs/compute.md explains the design and its error bounds.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace gslice::compute {

enum class ComputeClass : uint32_t { kGuaranteed = 0, kOpportunistic = 1 };  // == SliceClass

struct ComputePolicy {
  uint32_t cap_permille = 1000;    // hard cap; 1000 = none
  uint32_t share_permille = 1000;  // weight under contention within the class
  bool share_set = false;          // GSLICE_SHARE given explicitly
  ComputeClass cls = ComputeClass::kGuaranteed;
  bool capped() const { return cap_permille < 1000; }
};

// Parses GSLICE_COMPUTE, GSLICE_SHARE and GSLICE_CLASS values ("" = default). On bad input
// returns false with a message naming the variable in error[0..size); *out is unchanged.
bool ParseComputePolicy(const char* cap, const char* share, const char* cls, ComputePolicy* out,
                        char* error, int size);

// Tunables (ns). Chosen for the bounds in docs/compute.md.
inline constexpr int64_t kCapToleranceNs = 10'000'000;    // GCRA burst: 10 ms of wall time
inline constexpr int64_t kShareQuantumNs = 40'000'000;    // turn length, in virtual time
inline constexpr int64_t kActiveHoldNs = 1'000'000;       // "wants the GPU" after a launch attempt
inline constexpr int64_t kInflightHoldNs = 2'000'000;     // "has queued work" unless refreshed
inline constexpr int64_t kCapDepthNs = 2'000'000;         // queued-ahead work of capped slices
inline constexpr int64_t kOpportunisticDepthNs = 200'000; // ... of opportunistic slices near guaranteed work
inline constexpr int64_t kOpportunisticMarkerNs = 100'000; // their eager markers' spacing (no cap)
inline constexpr int64_t kOpportunisticDeepAfterNs = 50'000'000; // ... queue deeper once guaranteed work idled this long
inline constexpr int64_t kDrainWaitMaxNs = 5'000'000;     // longest wait for a peer to drain

// GCRA (the generic cell rate algorithm) on GPU time: a token bucket held as one number,
// the theoretical arrival time. Each measured busy interval b pushes it by b / rate; work
// may start while tat <= now + tolerance. Over any window W the slice gets at most
// rate * (W + tolerance) of GPU time, plus what was already queued (the depth bound).
// Lock-free: one CAS per charge; a process that dies leaves only a time in the past.
inline int64_t GcraCharge(std::atomic<int64_t>& tat, int64_t now, int64_t busy_ns, uint32_t rate_permille) {
  const int64_t inc = busy_ns * 1000 / (rate_permille == 0 ? 1 : rate_permille);
  int64_t cur = tat.load(std::memory_order_relaxed);
  int64_t next;
  do {
    // Time the slice did not use is not banked beyond the tolerance.
    next = (cur < now - kCapToleranceNs ? now - kCapToleranceNs : cur) + inc;
  } while (!tat.compare_exchange_weak(cur, next, std::memory_order_relaxed));
  return next;
}
// How long a launch must wait before the cap lets it start (0: now).
inline int64_t GcraWaitNs(int64_t tat, int64_t now) {
  const int64_t w = tat - kCapToleranceNs - now;
  return w > 0 ? w : 0;
}

// Virtual time of a share: measured busy / weight. The slice with the lowest virtual time
// among the contending ones of its class runs; the runner keeps its turn until it leads the
// next by kShareQuantumNs. Shares therefore hold in ratio; idle slices do not contend.
inline int64_t VtimeIncrement(int64_t busy_ns, uint32_t share_permille) {
  return busy_ns * 1000 / (share_permille == 0 ? 1 : share_permille);
}
// True when a slice with virtual time mine may launch now, given the lowest virtual time
// among the other contending slices of its class (min_other, INT64_MAX when none) and
// whether one of them holds the turn. The turn is exclusive: the runner keeps it until it
// leads by kShareQuantumNs; then the slice furthest behind takes it.
inline bool ShareTurn(int64_t mine, int64_t min_other, bool running, bool peer_running) {
  if (running) return mine <= min_other || mine - min_other <= kShareQuantumNs;
  return mine <= min_other && !peer_running;
}
// A slice that starts contending again catches up: it does not bank idle time.
inline int64_t VtimeOnActivation(int64_t mine, int64_t min_other) {
  return (min_other != INT64_MAX && mine < min_other) ? min_other : mine;
}

// Opportunistic rate controller (TGS-style AIMD on the guaranteed jobs' speed: OverlapSpeed on a
// time-sliced GPU, SpatialSpeed on MPS).
inline constexpr int64_t kControlPeriodNs = 250'000'000;  // one decision per 250 ms
inline constexpr int64_t kProbeEveryNs = 4'000'000'000;   // re-learn the baseline every 4 s
inline constexpr int64_t kProbeGapNs = 20'000'000;        // during a probe, stay out of gaps this short
inline constexpr int64_t kUnknownJobProbeNs = 1'000'000'000; // a busy job with no baseline is probed this soon
inline constexpr double kGuaranteedFloor = 0.97;          // keep >= 97% of solo speed
inline constexpr uint32_t kRateStepPermille = 25;         // additive increase per period
inline constexpr int64_t kGapStepNs = 1'000'000;          // the gap level's unit and additive step
inline constexpr int64_t kMaxGapNs = kProbeGapNs;         // the most conservative gap level
// Where processes share the GPU through MPS (spatial sharing), their kernels run at the same
// time on different SMs instead of taking turns, so opportunistic work next to busy
// guaranteed work costs it only what the shared SMs, memory and caches cost, not a
// context switch and a time slice. There the controller starts opportunistic work at the
// full rate and learns what it costs the guaranteed jobs from paired probes (below:
// LossEstimate); and queued opportunistic work does not hold guaranteed kernels back, so
// it may keep as much queued as capped work does.

// What the controller lets opportunistic work do next period. Two knobs, used one at a time:
//  - rate_permille: the share of GPU time it may use while guaranteed work is busy
//    (1000: no limit);
//  - gap_ns (only while the rate is 0): how long guaranteed work must have been idle before
//    opportunistic work enters its gap. On a GPU that time-slices processes, work queued in
//    a short gap delays the guaranteed job's next kernels, so even rate 0 can cost it speed;
//    staying out of gaps shorter than gap_ns bounds that.
struct OpportunisticLevel {
  uint32_t rate_permille = 0;
  int64_t gap_ns = 0;
  uint32_t held = 0;   // consecutive periods that held, not yet acted on
  uint32_t hold = 0;   // periods that must hold before the next step towards more sharing (0: 1)
  bool operator==(const OpportunisticLevel&) const = default;
};

// How the controller moves. Time-sliced (NextOpportunisticLevel, judged by OverlapSpeed): every
// period below the floor costs the guaranteed job a context switch per opportunistic kernel,
// so opportunistic work starts with no rate, one such period is enough to back off, and the
// rate grows slowly. A saturating guaranteed job gives opportunistic work almost nothing at
// any level (an H100 trace: a rate of 1-4% and gap 0 gave it 0.6% of its speed) while each
// level tried costs the guaranteed job a period below the floor. So a busy period starts
// from the safe end (rate 0, gap 4 ms: only idle stretches that long are entered), moves one
// step towards more sharing only after the guaranteed job has held for a second, and every
// shortfall doubles that wait (up to 4 s): the controller settles where the job holds
// instead of sawing around the floor.
// Spatial (MPS, NextSpatialRate): it starts free and sets the rate from the cost it has
// measured in paired probes, cutting between probes only on a large loss (SpatialCut).
struct ControllerTuning {
  uint32_t start_permille;  // the rate once guaranteed work is busy (after the first probe where there is one)
  uint32_t step_permille;   // additive increase per step
  uint32_t probe_periods;   // length of a baseline probe (spatial)
  int64_t probe_every_ns;   // one probe per this long (spatial)
  // After a cut, probe again this soon (0: at the usual time; spatial): the probe's pair
  // tells whether the loss that caused the cut was the opportunistic work's doing.
  int64_t reprobe_after_cut_ns;
  int64_t start_gap_ns;   // the gap at the start (time-sliced)
  uint32_t hold_periods;  // periods that must hold before a step towards more sharing ...
  bool backoff;           // ... doubled by every shortfall (up to kMaxHoldPeriods)
  // Judge the guaranteed jobs by OverlapSpeed (no baseline, no probes: the probe fields are
  // unused; time-sliced GPUs), else by SpatialSpeed against probed baselines, in pairs.
  bool by_overlap;
};
inline constexpr uint32_t kMaxHoldPeriods = static_cast<uint32_t>(kProbeEveryNs / kControlPeriodNs);
inline constexpr ControllerTuning kTimeSlicedTuning{0, kRateStepPermille, 1, kProbeEveryNs, 0, 4 * kGapStepNs, 4, true, true};
inline constexpr ControllerTuning kSpatialTuning{1000, 2 * kRateStepPermille, 2, 6'000'000'000, 1'000'000'000, 0, 1, false,
                                                 false};

// One step of the time-sliced controller. Guaranteed progress below kGuaranteedFloor of the
// baseline: the rate halves; at rate 0 the gap doubles (1, 2, 4 ... 20 ms); with
// tuning.backoff the wait before the next step towards more sharing doubles. Progress holds
// (for cur.hold periods in a row): the gap shrinks by 1 ms; at gap 0 the rate grows by
// tuning.step_permille. Backing off is multiplicative and advancing additive, so the
// guaranteed job spends little time below the floor.
inline OpportunisticLevel NextOpportunisticLevel(OpportunisticLevel cur, double progress, double baseline,
                                                 const ControllerTuning& tuning = kTimeSlicedTuning) {
  const bool holds = !(baseline > 0 && progress < kGuaranteedFloor * baseline);
  if (!holds) {
    cur.held = 0;
    if (tuning.backoff) {
      const uint32_t wait = cur.hold < 1 ? 1 : cur.hold;
      cur.hold = wait * 2 > kMaxHoldPeriods ? kMaxHoldPeriods : wait * 2;
    }
    if (cur.rate_permille > 0) {
      const uint32_t next = cur.rate_permille / 2;
      cur.rate_permille = next < 10 ? 0 : next;
    } else {
      cur.gap_ns = cur.gap_ns < kGapStepNs ? kGapStepNs : (cur.gap_ns * 2 > kMaxGapNs ? kMaxGapNs : cur.gap_ns * 2);
    }
    return cur;
  }
  if (++cur.held < cur.hold) return cur;
  cur.held = 0;
  if (cur.gap_ns > 0) {
    cur.gap_ns = cur.gap_ns > kGapStepNs ? cur.gap_ns - kGapStepNs : 0;
  } else {
    cur.rate_permille = cur.rate_permille + tuning.step_permille > 1000 ? 1000 : cur.rate_permille + tuning.step_permille;
  }
  return cur;
}

// The guaranteed jobs' speed in one control period, against their baselines. A job's speed
// is its launches per second of time it had work queued on the GPU ("busy"), not per second
// of wall time: a request-driven server launches at the rate requests arrive, so its launch
// rate follows the arrivals, while its launches per busy second follow only how fast the GPU
// serves it. Opportunistic work that takes the GPU from it (a time slice, or SMs and memory
// bandwidth under MPS) stretches its busy time, which is what is judged; a job that keeps
// the GPU busy all the time is judged by its launch rate, as before. Used where processes
// share the GPU through MPS; a time-sliced GPU is judged by OverlapSpeed (below).
struct GuaranteedPeriod {
  uint64_t launches = 0;     // launches issued in the period
  int64_t busy_ns = 0;       // time with work queued in the period
  double base_per_ns = 0;    // launches per busy ns with opportunistic work paused (0: unknown)
  int64_t overlap_ns = 0;    // ... of which this opportunistic process had work queued too
  bool judged() const { return base_per_ns > 0 && busy_ns > 0; }  // by GuaranteedSpeed
};
inline constexpr int64_t kMinJudgedBusyNs = 20'000'000;  // less busy time says nothing of speed
// The time the period's launches would have taken at each job's baseline speed, over the time
// they took: 1 = as fast as alone. Jobs without a baseline are left out. Returns -1 when the
// jobs judged were busy for less than kMinJudgedBusyNs in all.
inline double GuaranteedSpeed(const GuaranteedPeriod* jobs, int n) {
  double expected_ns = 0;
  int64_t busy_ns = 0;
  for (int i = 0; i < n; ++i) {
    if (!jobs[i].judged()) continue;
    expected_ns += static_cast<double>(jobs[i].launches) / jobs[i].base_per_ns;
    busy_ns += jobs[i].busy_ns;
  }
  return busy_ns < kMinJudgedBusyNs ? -1 : expected_ns / static_cast<double>(busy_ns);
}

// Adds p's launches, busy and overlap time to *sum (its baseline is left as it is).
inline void AddPeriod(GuaranteedPeriod* sum, const GuaranteedPeriod& p) {
  sum->launches += p.launches;
  sum->busy_ns += p.busy_ns;
  sum->overlap_ns += p.overlap_ns;
}

// The jobs' periods summed (judged_only: only those GuaranteedSpeed judges).
inline GuaranteedPeriod PeriodTotal(const GuaranteedPeriod* jobs, int n, bool judged_only = false) {
  GuaranteedPeriod t;
  for (int i = 0; i < n; ++i) {
    if (!judged_only || jobs[i].judged()) AddPeriod(&t, jobs[i]);
  }
  return t;
}
// 1 - overlap / busy of a total (busy > 0), each other opportunistic process counted as
// overlapping as much.
inline double OverlapBound(const GuaranteedPeriod& total, int opportunistic_peers) {
  const double lost = static_cast<double>(total.overlap_ns) * (1 + opportunistic_peers) / static_cast<double>(total.busy_ns);
  return lost >= 1 ? 0 : 1 - lost;
}
// On a GPU that time-slices processes, the guaranteed jobs can lose time to opportunistic
// work only while both have work queued: then the GPU runs one context at a time, and each
// such moment is at most a moment the guaranteed job waited. So 1 - overlap / busy bounds
// their speed from below, whatever their own speed does; the jobs' own noise (a host that
// runs them faster or slower from one second to the next) does not enter, and no baseline
// is needed. Each opportunistic process sees only its own overlap; the others on the GPU
// (opportunistic_peers) are assumed to overlap as much. -1 as GuaranteedSpeed.
inline double OverlapSpeed(const GuaranteedPeriod* jobs, int n, int opportunistic_peers) {
  const GuaranteedPeriod t = PeriodTotal(jobs, n);
  return t.busy_ns < kMinJudgedBusyNs ? -1 : OverlapBound(t, opportunistic_peers);
}

// Where processes share the GPU through MPS: GuaranteedSpeed, but never below what the overlap
// allows. Opportunistic work slows a guaranteed job only while it has work queued beside the
// job's (the same argument as OverlapSpeed: its kernels cannot take SMs, memory bandwidth or
// caches from the job while it has none), so 1 - overlap / busy bounds the job's speed from
// below here too. The measured speed is noisy: a server's launches per busy second move with
// how its requests cluster (on an H100 a server's periods read 0.68-1.42 of its baseline with
// no opportunistic work queued at all), and such a reading must not cut the rate. Jobs as in
// GuaranteedSpeed (those with a baseline); -1 as GuaranteedSpeed.
inline double SpatialSpeed(const GuaranteedPeriod* jobs, int n, int opportunistic_peers) {
  const double measured = GuaranteedSpeed(jobs, n);
  if (measured < 0) return -1;
  const double bound = OverlapBound(PeriodTotal(jobs, n, /*judged_only=*/true), opportunistic_peers);
  return bound > measured ? bound : measured;
}

// ---- MPS: what opportunistic work costs, from paired probes -------------------------------
//
// On MPS the guaranteed jobs' speed is read against a baseline measured with opportunistic
// work paused, and on a real host that reading moves more than the floor allows on its own:
// on an H100 a ResNet-50 training job's 250 ms readings ranged 0.87-1.31 of its baseline
// with a mean of 1.006, and the same job alone drifted by 5-8% from one 2 s stretch to the
// next. A controller that reacts to single readings (it used to cut after two periods below
// the floor, in proportion to the loss, and grow the rate back between cuts) spends much of
// the time cut for noise, and where opportunistic work truly costs a few percent it saws
// around the floor instead of settling below it.
//
// So the controller estimates the cost instead. Every probe (opportunistic work paused for
// kSpatialTuning.probe_periods) is paired with the kPairPeriods periods before it and after
// it, all at one rate: the guaranteed jobs' pooled speed in those periods against the
// probe's baseline is one sample of the loss, 1 - SpatialSpeed, at one exposure, the share
// of their busy time in which opportunistic work was queued beside theirs. Periods seconds
// apart share most of the host's drift, so the pair cancels it where a baseline 6 s old did
// not. The loss grows about linearly with the exposure, so the loss per unit exposure, l
// (the median over the last kLossSamples probes), sets the rate: the exposure that costs
// (1 - kGuaranteedFloor), (1 - kGuaranteedFloor) / l, shared with the other opportunistic
// processes. Between probes only a loss the noise cannot explain (kPairPeriods periods in a
// row, each with a speed under kSpatialCutBelow: a guaranteed job started, or the
// opportunistic job changed what it runs) cuts the rate at once, to a quarter, and brings the
// next probe forward.
inline constexpr uint32_t kPairPeriods = 2;       // periods pooled on each side of a probe
inline constexpr int kLossSamples = 8;            // probes the estimate remembers (48 s at one per 6 s)
inline constexpr double kMinExposure = 0.1;       // a sample with less exposure tells nothing
inline constexpr double kSpatialCutBelow = 0.80;  // kPairPeriods periods each below this cut at once
// A pair that reads the guaranteed jobs this much faster than their probe is no sample of
// the loss: the probe caught them in a slow moment (a warm-up, a stall), and the baseline is
// what is wrong. On H100s the first probe of a run, taken as the job warmed up, made its
// pair read 2.6-3.5x, and that sample of no loss held the rate at the full 1000 permille
// while the estimate had few others; ordinary pairs read 0.85-1.31. Such a pair is dropped
// and the jobs are probed again at once (PairSaysBaselineStale). So are kPairPeriods periods
// in a row between probes, each above it (the pair may have read less, pooled with a period
// before the probe), and with them the sample of the probe's pair. The bound is well above
// the noise: a probe that a stall caught in one of its two periods makes the pair read about
// 1.4x, and dropping such pairs, the high side of the noise only, biased the estimate
// upwards (in the model test, a 1.5 bound cost harmless work 7 points of its rate). A probe
// that caught the jobs at less than half their speed is what it finds.
inline constexpr double kStaleBaselineAbove = 2.0;

inline bool PairSaysBaselineStale(double pair_speed) { return pair_speed > kStaleBaselineAbove; }

// The share of the judged jobs' busy time in which this process had work queued beside
// theirs, each other opportunistic process counted as much, at most 1 (1 - OverlapBound).
inline double Exposure(const GuaranteedPeriod& total, int opportunistic_peers) {
  return total.busy_ns <= 0 ? 0 : 1 - OverlapBound(total, opportunistic_peers);
}

// Loss per unit exposure from paired probes: the median, over the newest kLossSamples
// samples of enough exposure, of each sample's loss over its exposure. A median, not a
// least-squares slope: a probe that caught the guaranteed job in a slow moment makes the
// pair read it several times faster than its baseline (an H100 trace: 3.5x), and one such
// sample held a slope at 0 for the next seven probes.
//
// Pairs with some exposure, but less than kMinExposure, are pooled until together they tell
// as much as one pair at kMinExposure, and then are one sample at their mean. A pair's loss
// carries the host's noise whatever its exposure, so n pairs of mean exposure x tell the
// loss per exposure as well as one pair at x sqrt(n): n >= (kMinExposure / x)^2. Without
// the pool, an estimate that held the rate too low for any pair to reach kMinExposure could
// never change: on an H200 a first sample of 0.58 per exposure (the server read 0.82 at
// exposure 0.31) set 51 permille, and the pairs after it, at exposures of 0.03-0.07, went
// unsampled for the rest of the run.
inline constexpr double kMinPooledExposure = 0.01;  // less: the opportunistic work was idle
class LossEstimate {
 public:
  // One pair's sample; false (and nothing kept) below kMinExposure, unless the pair
  // completes a pool (then true: the pool is the sample).
  bool Add(double loss, double exposure) {
    if (exposure >= kMinExposure) {
      ClearPool();  // older and at another rate: the sample supersedes it
      Push(loss, exposure > 1 ? 1 : exposure);
      return true;
    }
    if (!(exposure >= kMinPooledExposure)) return false;
    pool_loss_ += loss;
    pool_exposure_ += exposure;
    ++pool_n_;
    if (pool_exposure_ * pool_exposure_ < kMinExposure * kMinExposure * pool_n_) return false;
    Push(pool_loss_ / pool_n_, pool_exposure_ / pool_n_);
    ClearPool();
    return true;
  }
  int count() const { return count_; }
  int pooled() const { return pool_n_; }  // pairs in the pool (under kMinExposure) so far
  // l >= 0 (a guaranteed job that ran faster beside opportunistic work lost nothing); -1 with
  // no sample.
  double PerExposure() const {
    if (count_ == 0) return -1;
    double ratios[kLossSamples];
    for (int i = 0; i < count_; ++i) {  // the newest count_ samples, ending before next_
      const Sample& x = samples_[(next_ + kLossSamples - count_ + i) % kLossSamples];
      ratios[i] = x.loss / x.exposure;
    }
    std::sort(ratios, ratios + count_);
    const double median = count_ % 2 == 1 ? ratios[count_ / 2] : (ratios[count_ / 2 - 1] + ratios[count_ / 2]) / 2;
    return median > 0 ? median : 0;
  }
  void Clear() {
    count_ = next_ = 0;
    ClearPool();
  }
  // Forgets the newest sample (its probe's baseline turned out wrong).
  void DropNewest() {
    if (count_ == 0) return;
    next_ = (next_ + kLossSamples - 1) % kLossSamples;
    --count_;
  }

 private:
  struct Sample {
    double loss, exposure;
  };
  void Push(double loss, double exposure) {
    samples_[next_] = {loss, exposure};
    next_ = (next_ + 1) % kLossSamples;
    if (count_ < kLossSamples) ++count_;
  }
  void ClearPool() {
    pool_loss_ = pool_exposure_ = 0;
    pool_n_ = 0;
  }
  Sample samples_[kLossSamples] = {};
  int count_ = 0, next_ = 0;
  // Pairs below kMinExposure so far: their losses, their exposures, how many.
  double pool_loss_ = 0, pool_exposure_ = 0;
  int pool_n_ = 0;
};

// The rate whose exposure costs the guaranteed jobs (1 - kGuaranteedFloor) at loss per
// exposure l (< 0: nothing known, no limit); the other opportunistic processes take as much.
inline uint32_t RateForLoss(double per_exposure, int opportunistic_peers) {
  if (per_exposure <= 1 - kGuaranteedFloor) return 1000;
  const double exposure = (1 - kGuaranteedFloor) / per_exposure / (1 + opportunistic_peers);
  return static_cast<uint32_t>(exposure * 1000);
}

// While the estimate has fewer than kTrustedSamples samples, its median is one pair's
// reading, or the mean of two, and a pair that a moment of the host read slow sets a rate at
// which the next pairs barely tell anything: at exposure x the host's noise of a few percent
// reads as that much over x per exposure, so they go to the pool and take minutes to outvote
// it. On an H200 a first sample of 0.70 per exposure (the server read 0.89 at exposure 0.16)
// set 42 permille; ten pairs at exposures of 0.02-0.07, reading 0.95-1.06, made one pooled
// sample in 30 s, and a minute later the rate was still 82 permille. So until then the rate
// is at least kExplorePermille, shared with the other opportunistic processes: the next
// pairs are samples of their own at an exposure of about 0.2, where the same noise reads a
// third to a tenth as much. What it costs work that truly is expensive is two more pairs'
// time at that rate, once per guaranteed job met.
inline constexpr int kTrustedSamples = 3;
inline constexpr uint32_t kExplorePermille = 200;

// The rate the estimate allows (RateForLoss), at least kExplorePermille while it has
// samples but fewer than kTrustedSamples.
inline uint32_t EstimateRate(const LossEstimate& estimate, int opportunistic_peers) {
  const uint32_t rate = RateForLoss(estimate.PerExposure(), opportunistic_peers);
  if (estimate.count() == 0 || estimate.count() >= kTrustedSamples) return rate;
  const uint32_t explore = kExplorePermille / static_cast<uint32_t>(1 + opportunistic_peers);
  return rate > explore ? rate : explore;
}

// The rate after a pair: the estimate's, but where this pair's exposure was too small to
// sample (the rate was cut low, or the opportunistic job had little to run) it only grows
// towards it, by tuning.step_permille and a quarter of the rate, so the next pair can tell.
inline uint32_t NextSpatialRate(uint32_t rate_permille, const LossEstimate& estimate, bool sampled,
                                int opportunistic_peers, const ControllerTuning& tuning = kSpatialTuning) {
  const uint32_t target = EstimateRate(estimate, opportunistic_peers);
  if (sampled || target <= rate_permille) return target;
  const uint32_t grown = rate_permille + tuning.step_permille + rate_permille / 4;
  return grown < target ? grown : target;
}

// A cut between probes, from speeds below kSpatialCutBelow: the loss grows about
// linearly with the rate, so a loss of 20% or more at rate r puts the rate that costs
// (1 - kGuaranteedFloor) at 0.15 r or less; the cut goes to a quarter (one reading must not
// throw the whole rate away), and the probe it brings forward measures the rest.
inline uint32_t SpatialCut(uint32_t rate_permille) {
  const uint32_t next = rate_permille / 4;
  return next < 10 ? 0 : next;
}

// Queued-ahead bound: launches may go on while the estimated queued work
// (outstanding launches x mean launch cost) stays under depth_ns. At least one launch is
// always allowed, so a kernel longer than the bound still runs.
inline bool DepthAllows(uint64_t outstanding, int64_t mean_launch_ns, int64_t depth_ns) {
  if (outstanding == 0) return true;
  return static_cast<int64_t>(outstanding) * (mean_launch_ns > 0 ? mean_launch_ns : 1) < depth_ns;
}

}  // namespace gslice::compute
