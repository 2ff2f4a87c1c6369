#include "mps_controller.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernel_clock.h"

namespace gslice::compute {

MpsController::Seen& MpsController::Record(const PeerPeriod& p) {
  Seen* free_slot = nullptr;
  for (Seen& seen : seen_) {
    if (seen.id == p.id && seen.owner == p.owner) return seen;
    if (free_slot == nullptr && seen.id < 0) free_slot = &seen;
  }
  // A peer not seen before (or a new process in its entry).
  if (free_slot == nullptr) free_slot = &seen_[static_cast<unsigned>(p.id) % kMaxControlledPeers];
  *free_slot = {.id = p.id, .owner = p.owner};
  return *free_slot;
}

void MpsController::Settle(uint32_t from, Seen* cut_by) {
  if (rate_ < from && cut_by != nullptr) {
    cut_by->rate = rate_;
  } else if (rate_ > from) {
    // Beside every peer busy in this period: those whose readings grew it, and those busy
    // without one, whose speed gives no reason to hold back. Not beside one that has stopped
    // (busy within kActiveNs, not now): its rate still holds for a moment, and is its own.
    for (uint32_t k = 0; k < active_count_; ++k) {
      if (active_[k]->busy_at_ns == now_ns_) active_[k]->rate = std::max(active_[k]->rate, rate_);
    }
  }
}

double MpsController::JudgedMean() const {
  double sum = 0;
  for (uint32_t i = 0; i < judged_count_; ++i) sum += judged_[i];
  return sum / judged_count_;
}

void MpsController::Grow(ControlDecision* d, const char* why) {
  if (rate_ >= 1000) return;
  const double grown = rate_ * kGrowFactor;
  const uint32_t next = grown > rate_ + kGrowStepPermille ? static_cast<uint32_t>(grown) : rate_ + kGrowStepPermille;
  AddTrace(d, "compute: mps: %s: rate %u -> %u permille", why, rate_, next > 1000 ? 1000 : next);
  const uint32_t from = rate_;
  rate_ = next > 1000 ? 1000 : next;
  Settle(from, nullptr);
}

ControlDecision MpsController::Decide(const ControlPeriod& period, int64_t now_ns) {
  ControlDecision d;
  // Forget peers that are gone, so that their records serve new ones.
  for (Seen& seen : seen_) {
    bool present = false;
    for (int k = 0; k < period.count && !present; ++k) present = period.peers[k].id == seen.id;
    if (!present) seen = {};
  }
  // Readings of this period, judged against each peer's own floor; the rate settled beside
  // the peers busy now.
  double worst = 2;  // the lowest reading over its floor; 2: none
  Seen* worst_by = nullptr;
  bool wants_baseline = false;
  bool wants_alone = false;
  bool pending = false;  // a peer gathers samples beside opportunistic work for a reading
  uint32_t settled = 1000;
  active_count_ = 0;
  now_ns_ = now_ns;
  for (int k = 0; k < period.count; ++k) {
    const PeerPeriod& p = period.peers[k];
    Seen& seen = Record(p);
    const KernelSignal s = UnpackKernelSignal(p.kernel_signal);
    const bool fresh = s.sequence != 0 && s.sequence != seen.sequence;
    seen.sequence = s.sequence;
    if (seen.busy_at_ns >= 0 && now_ns - seen.busy_at_ns > kKeepRateNs) seen.rate = 1000;  // the job may be another
    if (p.busy_ns > 0 || fresh) seen.busy_at_ns = now_ns;
    if (seen.busy_at_ns >= 0 && now_ns - seen.busy_at_ns <= kActiveNs) {
      active_[active_count_++] = &seen;
      settled = std::min(settled, seen.rate);
    }
    if (!fresh) continue;
    wants_baseline |= s.wants_baseline;
    wants_alone |= s.wants_alone;
    pending |= s.pending;
    if (!s.known()) continue;
    const double floor = p.floor_permille / 1000.0;
    const double ratio = (s.speed_permille / 1000.0) / (floor > 0 ? floor : 1);
    if (ratio < worst) {
      worst = ratio;
      worst_by = &seen;
    }
  }
  if (probe_left_ > 0 && --probe_left_ > 0) {
    d.probe_pause = true;
    d.rate_permille = rate_;
    return d;
  }
  if (!period.guaranteed_busy) {
    StartOver();
    trial_.open = false;
    if (!idle_) {
      idle_ = true;
      if (rate_ < 1000) AddTrace(&d, "compute: mps: guaranteed work idle: no limit (%u permille kept for its return)", rate_);
    }
    d.rate_permille = 1000;
    d.forget_budget = true;
    return d;
  }
  if (settled != rate_ || idle_) {
    // Other guaranteed jobs are busy now (or these are back): the rate is where it settled
    // beside them, or, beside jobs none of whose was kept, no limit.
    if (settled != rate_ || rate_ < 1000) {
      AddTrace(&d, "compute: mps: guaranteed work %s: rate %u -> %u permille, where it settled beside %s",
               idle_ ? "back" : "beside changed", rate_, settled, settled < 1000 ? "them" : "none of them");
    }
    if (settled != rate_) {
      rate_ = settled;
      StartOver();
      trial_.open = false;
      hold_ns_ = kHoldNs;
    }
    idle_ = false;
  }
  if (wants_alone && !wants_baseline && judged_count_ >= kGrowPeriods) {
    wants_alone = JudgedMean() < 1 + kRenewMargin;  // near the floor: the reference matters
  }
  if ((wants_baseline || wants_alone) && (last_probe_ns_ == 0 || now_ns - last_probe_ns_ >= kMinProbeGapNs)) {
    last_probe_ns_ = now_ns;
    probe_left_ = kProbePeriods;
    AddTrace(&d, "compute: mps: a guaranteed job wants %s alone: pause for %u period(s)",
             wants_baseline ? "its kernels' time" : "its own time", kProbePeriods);
    d.probe_pause = true;
    d.rate_permille = rate_;
    return d;
  }
  if (!period.wanted) {
    // This process did not launch: the period's readings are not its doing (another
    // opportunistic process's, or none), and its rate stays where its own last judged it. The
    // window starts over when it launches again.
    StartOver();
    trial_.open = false;
    quiet_ = 0;
    d.rate_permille = rate_;
    return d;
  }
  if (worst >= 2) {
    // A reading that is pending is coming: opportunistic work is beside the guaranteed
    // kernels, only not yet often enough to read.
    if (pending) quiet_ = 0;
    if (rate_ < 1000 && period.wanted && !pending && ++quiet_ >= kQuietPeriods) {
      quiet_ = 0;
      Grow(&d, "no reading while held back");
    }
    d.rate_permille = rate_;
    return d;
  }
  quiet_ = 0;
  judged_[judged_next_] = worst;
  judged_next_ = (judged_next_ + 1) % kJudgePeriods;
  if (judged_count_ < kJudgePeriods) ++judged_count_;
  const double mean = JudgedMean();
  double spread = 0;  // the readings' sample standard deviation
  for (uint32_t i = 0; i < judged_count_; ++i) spread += (judged_[i] - mean) * (judged_[i] - mean);
  spread = judged_count_ > 1 ? std::sqrt(spread / (judged_count_ - 1)) : 0;
  const double error = spread / std::sqrt(static_cast<double>(judged_count_));  // the mean's
  // The mean's upper bound: under the floor, the shortfall is more than the window's noise.
  const double upper = mean + kCutConfidenceT * error;
  const bool full = judged_count_ >= kJudgePeriods;
  const bool under = full && upper < 1;
  if (full && trial_.open) {
    // The first full window since the last cut: did holding back buy anything?
    trial_.open = false;
    const double gain = mean - trial_.mean;
    const double noise = std::sqrt(error * error + trial_.error * trial_.error);
    if (under && gain < std::max(kBoughtMargin, noise)) {
      AddTrace(&d, "compute: mps: holding back bought nothing (%.3f of the floor over %u periods, %.3f before the cut): "
               "rate %u -> %u permille, no cut on a mean for %lld s",
               mean, judged_count_, trial_.mean, rate_, trial_.from_rate, static_cast<long long>(hold_ns_ / 1'000'000'000));
      const uint32_t from = rate_;
      rate_ = trial_.from_rate;
      Settle(from, nullptr);
      hold_until_ns_ = now_ns + hold_ns_;
      hold_ns_ = std::min(2 * hold_ns_, kMaxHoldNs);
      StartOver();
      d.rate_permille = rate_;
      return d;
    }
    if (under) hold_ns_ = kHoldNs;  // it bought some: the next one that buys nothing holds briefly
  }
  if (worst < 1 - kCutNowMargin || (under && now_ns >= hold_until_ns_)) {
    // In proportion to the shortfall: a reading's error is some hundredths, and a cut on a
    // shortfall that small is as likely noise as not.
    const double shortfall = 1 - (worst < 1 - kCutNowMargin ? worst : mean);
    const double cut = rate_ * std::max(kCutFactor, 1 - kCutGain * shortfall);
    const uint32_t next = cut < kMinRatePermille ? 0 : static_cast<uint32_t>(cut);
    AddTrace(&d, "compute: mps: guaranteed kernels at %.3f of their floor (%.3f over %u periods, at most %.3f): rate %u -> %u permille",
             worst, mean, judged_count_, upper, rate_, next);
    if (next < rate_) trial_ = {.open = true, .from_rate = rate_, .mean = mean, .error = error};
    const uint32_t from = rate_;
    rate_ = next;
    Settle(from, worst_by);
    StartOver();  // the next judgement is of readings at the new rate
  } else if (rate_ < 1000 && judged_count_ >= kGrowPeriods && mean >= 1 + kGrowMargin) {
    char why[96];
    snprintf(why, sizeof why, "guaranteed kernels above their floor (%.3f over %u periods)", mean, judged_count_);
    Grow(&d, why);
    trial_.open = false;
    StartOver();  // the next judgement is of readings at the new rate
  }
  d.rate_permille = rate_;
  return d;
}

}  // namespace gslice::compute
