// The opportunistic rate controller for a GPU shared through MPS: processes' kernels run at
// the same time on different SMs, so opportunistic work beside a busy guaranteed job costs it
// only what the shared SMs, memory and caches cost. The controller starts opportunistic work
// at the full rate and estimates that cost from paired probes.
//
// A probe pauses opportunistic work for tuning.probe_periods and measures each guaranteed
// job's speed alone (its baseline). The kPairPeriods periods before it and after it, all at
// one rate, are its pair: the jobs' pooled speed in them against the probe's baseline is one
// sample of the loss, 1 - SpatialSpeed, at one exposure, the share of their busy time in which
// opportunistic work was queued beside theirs. Periods seconds apart share most of the host's
// drift, so the pair cancels it. The loss grows about linearly with the exposure, so the loss
// per unit exposure l (LossEstimate: the median over recent samples) sets the rate: the
// exposure that costs (1 - floor), (1 - floor) / l, shared with the other opportunistic
// processes. Between probes only a loss the noise cannot explain (kPairPeriods periods in a
// row, each with a speed under kSpatialCutBelow: a guaranteed job started, or the
// opportunistic job changed what it runs) cuts the rate at once and brings the next probe
// forward. Pure (controller.h).
#pragma once

#include <cstdint>

#include "controller.h"

namespace gslice::compute {

inline constexpr uint32_t kPairPeriods = 2;       // periods pooled on each side of a probe
inline constexpr int kLossSamples = 8;            // probes the estimate remembers (48 s at one per 6 s)
inline constexpr double kMinExposure = 0.1;       // a sample with less exposure tells nothing alone
inline constexpr double kMinPooledExposure = 0.01;  // less: the opportunistic work was idle
inline constexpr double kSpatialCutBelow = 0.80;  // kPairPeriods periods each below this cut at once
// A pair that reads the guaranteed jobs this much faster than their probe is no sample of the
// loss: the probe caught them in a slow moment (a warm-up, a stall) and its baseline is wrong.
// The pair is dropped and the jobs are probed again at once; so are kPairPeriods periods in a
// row between probes each above it. Well above the noise (a stall in one of a probe's two
// periods reads about 1.4x): dropping high readings only would bias the estimate upwards.
inline constexpr double kStaleBaselineAbove = 2.0;
// While the estimate has fewer than kTrustedSamples samples, its median is one or two pairs'
// reading, and one pair read slow by a moment of the host would set a rate at which the next
// pairs tell little (at exposure x the host's noise reads as noise / x per exposure). So until
// then the rate is at least kExplorePermille (shared with the other opportunistic processes):
// the next pairs are samples of their own at an exposure where that noise reads small.
inline constexpr int kTrustedSamples = 3;
inline constexpr uint32_t kExplorePermille = 200;
// A busy job with no baseline (it started, or was too idle at the last probe) is probed this
// soon, not at the next regular probe.
inline constexpr int64_t kUnknownJobProbeNs = 1'000'000'000;

struct MpsTuning {
  uint32_t start_permille = 1000;  // the rate after the first probe of a busy stretch
  uint32_t step_permille = 50;     // growth towards the estimate's rate after an unsampled pair
  uint32_t probe_periods = 2;      // length of a probe
  int64_t probe_every_ns = 6'000'000'000;  // one probe per this long
  // After a cut, probe again this soon: the probe's pair tells whether the loss that caused
  // the cut was the opportunistic work's doing.
  int64_t reprobe_after_cut_ns = 1'000'000'000;
};

inline bool PairSaysBaselineStale(double pair_speed) { return pair_speed > kStaleBaselineAbove; }

// The share of the judged jobs' busy time in which this process had work queued beside
// theirs, each other opportunistic process counted as much, at most 1 (1 - OverlapBound).
double Exposure(const GuaranteedPeriod& total, int opportunistic_peers);

// Loss per unit exposure from paired probes: the median, over the newest kLossSamples samples
// of enough exposure, of each sample's loss over its exposure. A median, not a least-squares
// slope: one probe that caught the job in a slow moment must not hold the estimate at 0.
// Pairs with some exposure but less than kMinExposure are pooled until together they tell as
// much as one pair at kMinExposure (a pair's loss carries the host's noise whatever its
// exposure, so n pairs at mean exposure x tell as much as one at x sqrt(n)), and then are one
// sample at their mean; without the pool an estimate that holds the rate too low for any pair
// to reach kMinExposure could never change.
class LossEstimate {
 public:
  // One pair's sample; false (and nothing kept) below kMinExposure, unless the pair completes
  // a pool (then true: the pool is the sample).
  bool Add(double loss, double exposure);
  int count() const { return count_; }
  int pooled() const { return pool_n_; }  // pairs in the pool (under kMinExposure) so far
  // l >= 0 (a job that ran faster beside opportunistic work lost nothing); -1 with no sample.
  double PerExposure() const;
  void Clear();
  // Forgets the newest sample (its probe's baseline turned out wrong).
  void DropNewest();

 private:
  struct Sample {
    double loss, exposure;
  };
  void Push(double loss, double exposure);
  void ClearPool();
  Sample samples_[kLossSamples] = {};
  int count_ = 0, next_ = 0;
  double pool_loss_ = 0, pool_exposure_ = 0;  // pairs below kMinExposure so far: their sums
  int pool_n_ = 0;
};

// The rate whose exposure costs the guaranteed jobs (1 - floor) at loss per exposure l (< 0:
// nothing known, no limit); the other opportunistic processes take as much.
uint32_t RateForLoss(double per_exposure, int opportunistic_peers, double floor);
// RateForLoss of the estimate, at least kExplorePermille while it has samples but fewer than
// kTrustedSamples.
uint32_t EstimateRate(const LossEstimate& estimate, int opportunistic_peers, double floor);
// The rate after a pair: the estimate's; but where the pair was not sampled (its exposure too
// small) the rate only grows towards it, by step_permille and a quarter, so the next can tell.
uint32_t NextSpatialRate(uint32_t rate_permille, const LossEstimate& estimate, bool sampled, int opportunistic_peers,
                         double floor, uint32_t step_permille);
// A cut between probes: a loss of 20% or more at rate r puts the rate that costs the floor's
// few percent at 0.15 r or less; the cut goes to a quarter (one reading must not throw the
// whole rate away; under 10 permille: 0) and the probe it brings forward measures the rest.
uint32_t SpatialCut(uint32_t rate_permille);

class MpsController {
 public:
  explicit MpsController(const MpsTuning& tuning = {}) : tuning_(tuning) {}
  // One period's decision at now_ns (the gate's clock; only differences are used).
  // REQUIRES: called once per kControlPeriodNs.
  ControlDecision Decide(const ControlPeriod& period, int64_t now_ns);
  const LossEstimate& loss() const { return loss_; }
  uint32_t rate_permille() const { return rate_; }
  bool probing() const { return probing_; }

 private:
  // What the controller keeps of one guaranteed peer.
  struct Job {
    int id = -1;  // PeerPeriod::id, owner; -1: unused
    uint64_t owner = 0;
    uint64_t probe_launches = 0;  // launches and busy time over the probe under way
    int64_t probe_busy_ns = 0;
    double base_per_ns = 0;  // launches per busy ns, opportunistic work paused (0: unknown)
    GuaranteedPeriod recent[kPairPeriods] = {};  // the newest periods (outside probes)
    GuaranteedPeriod pair = {};             // the pair's sum over the periods around the probe
  };
  static void Reset(Job* j, const PeerPeriod& p);
  Job& JobOf(const ControlPeriod& period, const PeerPeriod& p);
  void ClosePeriod(const ControlPeriod& period, GuaranteedPeriod* out);
  int PeerPeriods(const ControlPeriod& period, bool pair, uint32_t k, GuaranteedPeriod* out);
  const GuaranteedPeriod& NewestPeriod(const Job& j, uint32_t k) const;
  void StartProbe(const ControlPeriod& period, int64_t now_ns, double floor);
  int EndProbe(bool* first);
  void ProbeAgain(int64_t now_ns, int peers, double floor);
  void EndPair(const ControlPeriod& period, int64_t now_ns, double floor, ControlDecision* d);
  void CheckCut(const ControlPeriod& period, int64_t now_ns, double floor, ControlDecision* d);

  MpsTuning tuning_;
  uint32_t rate_ = 0;
  bool started_ = false;  // the first probe of this busy stretch has ended
  bool probing_ = false;
  uint32_t probe_left_ = 0;  // periods of the probe still to measure
  uint32_t saved_rate_ = 0;  // the rate the probe returns to
  int64_t last_probe_ns_ = 0;
  // The loss per exposure; whether the last probe's pair gave it its newest sample; the
  // periods of the pair after the probe still to pool; the newest periods kept for the next
  // pair and for a cut (recent_count_ of them, the next in recent_slot_).
  LossEstimate loss_;
  bool pair_sampled_ = false;
  uint32_t pair_left_ = 0;
  uint32_t recent_count_ = 0;
  uint32_t recent_slot_ = 0;
  Job jobs_[kMaxControlledPeers];
};

}  // namespace gslice::compute
