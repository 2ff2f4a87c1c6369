#include "mps_controller.h"

#include <algorithm>

namespace gslice::compute {

double Exposure(const GuaranteedPeriod& total, int opportunistic_peers) {
  return total.busy_ns <= 0 ? 0 : 1 - OverlapBound(total, opportunistic_peers);
}

// ---- LossEstimate ------------------------------------------------------------------------

bool LossEstimate::Add(double loss, double exposure) {
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

double LossEstimate::PerExposure() const {
  const int n = count_ < kLossSamples ? count_ : kLossSamples;
  if (n <= 0) return -1;
  double ratios[kLossSamples];
  for (int i = 0; i < n; ++i) {  // the newest n samples, ending before next_
    const Sample& x = samples_[(next_ + kLossSamples - n + i) % kLossSamples];
    ratios[i] = x.loss / x.exposure;
  }
  std::sort(ratios, ratios + n);
  const double median = n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
  return median > 0 ? median : 0;
}

void LossEstimate::Clear() {
  count_ = next_ = 0;
  ClearPool();
}

void LossEstimate::DropNewest() {
  if (count_ == 0) return;
  next_ = (next_ + kLossSamples - 1) % kLossSamples;
  --count_;
}

void LossEstimate::Push(double loss, double exposure) {
  samples_[next_] = {loss, exposure};
  next_ = (next_ + 1) % kLossSamples;
  if (count_ < kLossSamples) ++count_;
}

void LossEstimate::ClearPool() {
  pool_loss_ = pool_exposure_ = 0;
  pool_n_ = 0;
}

// ---- rates -------------------------------------------------------------------------------

uint32_t RateForLoss(double per_exposure, int opportunistic_peers, double floor) {
  if (per_exposure <= 1 - floor) return 1000;
  const double exposure = (1 - floor) / per_exposure / (1 + opportunistic_peers);
  return static_cast<uint32_t>(exposure * 1000);
}

uint32_t EstimateRate(const LossEstimate& estimate, int opportunistic_peers, double floor) {
  const uint32_t rate = RateForLoss(estimate.PerExposure(), opportunistic_peers, floor);
  if (estimate.count() == 0 || estimate.count() >= kTrustedSamples) return rate;
  const uint32_t explore = kExplorePermille / static_cast<uint32_t>(1 + opportunistic_peers);
  return rate > explore ? rate : explore;
}

uint32_t NextSpatialRate(uint32_t rate_permille, const LossEstimate& estimate, bool sampled, int opportunistic_peers,
                         double floor, uint32_t step_permille) {
  const uint32_t target = EstimateRate(estimate, opportunistic_peers, floor);
  if (sampled || target <= rate_permille) return target;
  const uint32_t grown = rate_permille + step_permille + rate_permille / 4;
  return grown < target ? grown : target;
}

uint32_t SpatialCut(uint32_t rate_permille) {
  const uint32_t next = rate_permille / 4;
  return next < 10 ? 0 : next;
}

// ---- MpsController -----------------------------------------------------------------------

// A fresh record for peer p.
void MpsController::Reset(Job* j, const PeerPeriod& p) {
  *j = Job();
  j->id = p.id;
  j->owner = p.owner;
}

// The record of peer p: found by id (reset when another process holds the entry now), else a
// record no peer of this period uses, reset.
MpsController::Job& MpsController::JobOf(const ControlPeriod& period, const PeerPeriod& p) {
  for (Job& j : jobs_) {
    if (j.id != p.id) continue;
    if (j.owner != p.owner) Reset(&j, p);
    return j;
  }
  for (Job& j : jobs_) {
    bool in_use = false;
    for (int k = 0; k < period.count && j.id >= 0 && !in_use; ++k) in_use = period.peers[k].id == j.id;
    if (!in_use) {
      Reset(&j, p);
      return j;
    }
  }
  return jobs_[0];  // unreachable: there are as many records as peers
}

// Takes the period in: each peer's launches and busy time into out (against its baseline);
// within a probe into the probe's sums, else into the peer's newest periods and, while a pair
// is being pooled after a probe, into the pair.
void MpsController::ClosePeriod(const ControlPeriod& period, GuaranteedPeriod* out) {
  for (int i = 0; i < period.count; ++i) {
    const PeerPeriod& p = period.peers[i];
    Job& j = JobOf(period, p);
    out[i] = {.launches = p.launches, .busy_ns = p.busy_ns, .base_per_ns = j.base_per_ns, .overlap_ns = p.overlap_ns};
    if (probing_) {
      j.probe_launches += p.launches;
      j.probe_busy_ns += p.busy_ns;
    } else {
      j.recent[recent_slot_] = {.launches = p.launches, .busy_ns = p.busy_ns, .overlap_ns = p.overlap_ns};
      if (pair_left_ > 0) AddPeriod(&j.pair, j.recent[recent_slot_]);
    }
  }
  if (!probing_) {
    recent_slot_ = (recent_slot_ + 1) % kPairPeriods;
    if (recent_count_ < kPairPeriods) ++recent_count_;
  }
}

// A peer's k-th newest period (1: the newest; k <= recent_count_).
const GuaranteedPeriod& MpsController::NewestPeriod(const Job& j, uint32_t k) const {
  return j.recent[(recent_slot_ + kPairPeriods - k) % kPairPeriods];
}

// The period's peers against their current baselines, into out: the pair pooled (pair),
// else the k-th newest period. Returns how many.
int MpsController::PeerPeriods(const ControlPeriod& period, bool pair, uint32_t k, GuaranteedPeriod* out) {
  for (int i = 0; i < period.count; ++i) {
    const Job& j = JobOf(period, period.peers[i]);
    out[i] = pair ? j.pair : NewestPeriod(j, k);
    out[i].base_per_ns = j.base_per_ns;
  }
  return period.count;
}

// Pauses opportunistic work to measure the jobs alone; the newest periods are the pair's first
// half, at the rate the probe returns to (after a pause of the guaranteed work: the rate the
// kept estimate allows, if lower than the start).
void MpsController::StartProbe(const ControlPeriod& period, int64_t now_ns, double floor) {
  for (int i = 0; i < period.count; ++i) {
    Job& j = JobOf(period, period.peers[i]);
    j.pair = {};
    for (uint32_t k = 1; started_ && k <= recent_count_; ++k) AddPeriod(&j.pair, NewestPeriod(j, k));
  }
  probing_ = true;
  probe_left_ = tuning_.probe_periods;
  for (Job& j : jobs_) {
    j.probe_launches = 0;
    j.probe_busy_ns = 0;
  }
  last_probe_ns_ = now_ns;
  saved_rate_ = started_ ? rate_ : std::min(tuning_.start_permille, EstimateRate(loss_, period.opportunistic_peers, floor));
  rate_ = 0;
}

// Ends a probe: each peer busy long enough during it gets its speed alone as its baseline.
// Returns how many did; *first: one of them had none before.
int MpsController::EndProbe(bool* first) {
  int measured = 0;
  *first = false;
  for (Job& j : jobs_) {
    if (j.probe_busy_ns >= kMinJudgedBusyNs) {
      *first |= j.base_per_ns == 0;
      j.base_per_ns = static_cast<double>(j.probe_launches) / static_cast<double>(j.probe_busy_ns);
      ++measured;
    }
    j.probe_launches = 0;
    j.probe_busy_ns = 0;
  }
  return measured;
}

// The last probe's baselines are stale: the next period probes again, and until its pair the
// rate is at most what the estimate allows.
void MpsController::ProbeAgain(int64_t now_ns, int peers, double floor) {
  rate_ = std::min(rate_, EstimateRate(loss_, peers, floor));
  pair_sampled_ = false;
  recent_count_ = 0;
  last_probe_ns_ = now_ns - tuning_.probe_every_ns;
}

// A pair is complete: its sample goes into the estimate, which sets the rate. A pair that
// says the probe's baselines are wrong is dropped.
void MpsController::EndPair(const ControlPeriod& period, int64_t now_ns, double floor, ControlDecision* d) {
  const int peers = period.opportunistic_peers;
  GuaranteedPeriod jobs[kMaxControlledPeers];
  const int n = PeerPeriods(period, /*pair=*/true, 0, jobs);
  const double speed = SpatialSpeed(jobs, n, peers);
  const double exposure = Exposure(PeriodTotal(jobs, n, /*judged_only=*/true), peers);
  if (PairSaysBaselineStale(speed)) {
    ProbeAgain(now_ns, peers, floor);
    AddTrace(d, "compute: controller: pair: guaranteed speed %.3f at exposure %.2f: the probe's baseline is stale; "
             "probing again; rate %u permille", speed, exposure, rate_);
    return;
  }
  const bool sampled = speed >= 0 && loss_.Add(1 - speed, exposure);
  pair_sampled_ = sampled;
  rate_ = NextSpatialRate(rate_, loss_, sampled, peers, floor, tuning_.step_permille);
  recent_count_ = 0;  // periods at the old rate say nothing of the new one
  AddTrace(d, "compute: controller: pair: guaranteed speed %.3f at exposure %.2f (%s, %d pooled); loss per exposure "
           "%.3f over %d; rate %u permille, floor %.3f", speed, exposure, sampled ? "sampled" : "not sampled",
           loss_.pooled(), loss_.PerExposure(), loss_.count(), rate_, floor);
}

// Between probes: kPairPeriods periods in a row each below kSpatialCutBelow cut the rate and
// bring the next probe forward (a host's stall slows the job as much, but seldom for half a
// second); kPairPeriods periods in a row each above kStaleBaselineAbove say the last probe's
// baseline is wrong: its pair's sample is dropped and the next period probes again.
void MpsController::CheckCut(const ControlPeriod& period, int64_t now_ns, double floor, ControlDecision* d) {
  if (recent_count_ < kPairPeriods) return;
  const int peers = period.opportunistic_peers;
  double fastest = 0, slowest = 0;
  for (uint32_t k = 1; k <= kPairPeriods; ++k) {
    GuaranteedPeriod jobs[kMaxControlledPeers];
    const double speed = SpatialSpeed(jobs, PeerPeriods(period, /*pair=*/false, k, jobs), peers);
    if (speed < 0) return;
    fastest = speed > fastest ? speed : fastest;
    slowest = k == 1 || speed < slowest ? speed : slowest;
  }
  if (PairSaysBaselineStale(slowest)) {
    if (pair_sampled_) loss_.DropNewest();
    ProbeAgain(now_ns, peers, floor);
    AddTrace(d, "compute: controller: guaranteed speed at least %.3f in %u periods: the probe's baseline is stale; "
             "probing again; loss per exposure %.3f over %d; rate %u permille",
             slowest, kPairPeriods, loss_.PerExposure(), loss_.count(), rate_);
    return;
  }
  if (fastest >= kSpatialCutBelow) return;
  rate_ = SpatialCut(rate_);
  recent_count_ = 0;
  const int64_t soon = now_ns + tuning_.reprobe_after_cut_ns - tuning_.probe_every_ns;
  if (soon < last_probe_ns_) last_probe_ns_ = soon;  // the next probe at the latest then
  AddTrace(d, "compute: controller: cut: guaranteed speed at most %.3f in %u periods; rate %u permille", fastest,
           kPairPeriods, rate_);
}

ControlDecision MpsController::Decide(const ControlPeriod& period, int64_t now_ns) {
  ControlDecision d;
  GuaranteedPeriod jobs[kMaxControlledPeers];
  ClosePeriod(period, jobs);
  const int n = period.count;
  const int peers = period.opportunistic_peers;
  const double floor = StrictestFloor(period);
  if (!period.guaranteed_busy) {
    // Nothing to protect (the gate lets opportunistic work run freely). When guaranteed work
    // returns a probe measures it alone first; the estimate of what opportunistic work costs
    // it is kept (a job that paused is hurt as before), and a job seen for the first time
    // clears it (EndProbe).
    probing_ = false;
    started_ = false;
    pair_left_ = 0;
    recent_count_ = 0;
    d.rate_permille = rate_;
    d.forget_budget = true;
    return d;
  }
  if (probing_) {
    if (--probe_left_ == 0) {
      bool first = false;
      const int measured = EndProbe(&first);
      // A job measured for the first time may be hurt more or less than those the samples
      // came from: the estimate starts again.
      if (first) loss_.Clear();
      AddTrace(&d, "compute: controller: probe measured %d guaranteed job(s) alone; back to rate %u permille, gap 0 us",
               measured, saved_rate_);
      started_ = true;
      probing_ = false;
      pair_left_ = kPairPeriods;
      rate_ = saved_rate_;
    }
  } else if (pair_left_ > 0) {  // pooling the pair's second half: no other decision meanwhile
    if (--pair_left_ == 0) EndPair(period, now_ns, floor, &d);
  } else {
    bool unknown = false;
    for (int i = 0; i < n; ++i) unknown |= jobs[i].base_per_ns == 0 && jobs[i].busy_ns >= kMinJudgedBusyNs;
    const int64_t since = now_ns - last_probe_ns_;
    if (!started_ || since >= tuning_.probe_every_ns || (unknown && since >= kUnknownJobProbeNs)) {
      StartProbe(period, now_ns, floor);
    } else if (const double speed = SpatialSpeed(jobs, n, peers); speed >= 0) {
      const GuaranteedPeriod total = PeriodTotal(jobs, n);
      AddTrace(&d, "compute: controller: guaranteed speed %.3f (busy %lld ms, overlap %lld us); rate %u permille, floor %.3f",
               speed, static_cast<long long>(total.busy_ns / 1'000'000), static_cast<long long>(total.overlap_ns / 1000),
               rate_, floor);
      CheckCut(period, now_ns, floor, &d);
    }
  }
  d.rate_permille = rate_;
  d.probe_pause = probing_;
  return d;
}

}  // namespace gslice::compute
