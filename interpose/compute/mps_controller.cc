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
  if (trial_.by == free_slot) trial_.open = false;  // the job a cut is on trial for is gone
  *free_slot = Seen{};
  free_slot->id = p.id;
  free_slot->owner = p.owner;
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

namespace {

// The sample standard deviation of v[0, n) about its mean (0 under two values).
double Spread(const double* v, uint32_t n, double mean) {
  if (n < 2) return 0;
  double squares = 0;
  for (uint32_t i = 0; i < n; ++i) squares += (v[i] - mean) * (v[i] - mean);
  return std::sqrt(squares / (n - 1));
}

}  // namespace

double MpsController::JudgedMean() const {
  double sum = 0;
  for (uint32_t i = 0; i < judged_count_; ++i) sum += judged_[i];
  return sum / judged_count_;
}

void MpsController::Grow(ControlDecision* d, const char* why, double factor) {
  if (rate_ >= 1000) return;
  const double grown = rate_ * factor;
  const uint32_t next = grown > rate_ + kGrowStepPermille ? static_cast<uint32_t>(grown) : rate_ + kGrowStepPermille;
  AddTrace(d, "compute: mps: %s: rate %u -> %u permille", why, rate_, next > 1000 ? 1000 : next);
  const uint32_t from = rate_;
  rate_ = next > 1000 ? 1000 : next;
  Settle(from, nullptr);
}

uint32_t MpsController::CutRate(double shortfall) const {
  const double cut = rate_ * std::max(kCutFactor, 1 - kCutGain * shortfall);
  return cut < kMinRatePermille ? 0 : static_cast<uint32_t>(cut);
}

void MpsController::Cut(uint32_t next, Seen* by, Trial trial) {
  if (next < rate_) {
    trial_ = trial;
    trial_.open = true;
    trial_.from_rate = rate_;
  }
  const uint32_t from = rate_;
  rate_ = next;
  Settle(from, by);
  StartOver();  // the next judgement is of readings (or looks) at the new rate
}

bool MpsController::UndoFutileCut(double mean, double error, bool under, ControlDecision* d) {
  trial_.open = false;
  const double gain = mean - trial_.mean;
  const double noise = std::sqrt(error * error + trial_.error * trial_.error);
  if (!under || gain >= std::max(kBoughtMargin, noise)) {
    if (under) hold_ns_ = kHoldNs;  // it bought some: the next one that buys nothing holds briefly
    return false;
  }
  const bool looks = trial_.by != nullptr;
  char over[32] = "";
  if (!looks) snprintf(over, sizeof over, " over %u periods", judged_count_);
  AddTrace(d, "compute: mps: holding back bought nothing%s (%.3f of the floor%s, %.3f before the cut): "
           "rate %u -> %u permille, no cut on %s for %lld s",
           looks ? " by the looks" : "", mean, over, trial_.mean, rate_, trial_.from_rate, looks ? "looks" : "a mean",
           static_cast<long long>(hold_ns_ / 1'000'000'000));
  const uint32_t from = rate_;
  rate_ = trial_.from_rate;
  Settle(from, nullptr);
  hold_until_ns_ = now_ns_ + hold_ns_;
  hold_ns_ = std::min(2 * hold_ns_, kMaxHoldNs);
  StartOver();
  d->rate_permille = rate_;
  return true;
}

double MpsController::Sums::variance() const {
  if (n < 2) return 0;
  const double m = sum / n;
  return std::max(0.0, (squares - n * m * m) / (n - 1));
}

bool MpsController::LookLevel(const Seen& seen, double* mean, double* error) const {
  if (seen.looks_count == 0 || seen.look_rate != rate_) return false;
  double sum = 0, errors = 0;
  for (uint32_t i = 0; i < seen.looks_count; ++i) {
    sum += seen.looks[i];
    errors += seen.look_errors[i] * seen.look_errors[i];
  }
  const uint32_t n = seen.looks_count;
  *mean = sum / n;
  // Each look's own error, or the looks' spread where that is more: a look's periods are not
  // independent samples, and the job's phase moves between looks.
  const double between = Spread(seen.looks, n, *mean) / std::sqrt(static_cast<double>(n));
  *error = std::max({std::sqrt(errors) / n, between, kMinLookError});
  return true;
}

bool MpsController::StartLook(const ControlPeriod& period, bool urgent, ControlDecision* d) {
  if (look_ != Look::kNone || rate_ < kMinRatePermille || ran_rate_ != rate_) return false;
  // Due: soon for a rate no look has read yet, or where a reading says the job is far under its
  // floor; kLookGapNs after the rate's first look, and twice as long after each more while
  // the rate's looks say the job holds its floor, to kFarLookGapNs; kLookGapNs where they say
  // it is under it.
  int64_t gap = kFarLookGapNs;
  bool any = false;
  for (uint32_t k = 0; k < active_count_; ++k) {
    const Seen& seen = *active_[k];
    if (!Looked(seen, period) || seen.busy_at_ns != now_ns_ || seen.recent_count < kLookBesidePeriods) continue;
    any = true;
    double mean = 0, error = 0;
    if (!LookLevel(seen, &mean, &error)) {
      gap = std::min(gap, kUrgentLookGapNs);
    } else {
      gap = std::min(gap, mean < 1 ? kLookGapNs : std::min(kFarLookGapNs, kLookGapNs << (seen.looks_count - 1)));
    }
  }
  if (!any) return false;
  if (urgent) gap = std::min(gap, kUrgentLookGapNs);
  if (last_look_ns_ != 0 && now_ns_ - last_look_ns_ < gap) return false;
  for (uint32_t k = 0; k < active_count_; ++k) {
    Seen& seen = *active_[k];
    seen.in_look = Looked(seen, period) && seen.busy_at_ns == now_ns_ && seen.recent_count >= kLookBesidePeriods;
    seen.beside = seen.alone = {};
    if (!seen.in_look) continue;
    for (uint32_t i = 0; i < kLookBesidePeriods; ++i) seen.beside.Add(static_cast<double>(seen.recent[i]));
  }
  look_ = Look::kPause;
  look_left_ = kLookPausePeriods;
  last_look_ns_ = now_ns_;
  d->probe_pause = true;
  d->rate_permille = rate_;
  return true;
}

void MpsController::GiveUpLook() {
  look_ = Look::kNone;
  for (Seen& seen : seen_) seen.in_look = false;
}

bool MpsController::LookPeriod(const ControlPeriod& period, ControlDecision* d) {
  if (look_ == Look::kNone) return false;
  // A look needs this process held back, or launching at rate_, throughout, and no other
  // opportunistic process running.
  bool reading = false;
  if (period.guaranteed_busy && period.wanted && !period.opportunistic_busy &&
      (look_ == Look::kPause || ran_rate_ == rate_)) {
    const uint32_t stage_periods = look_ == Look::kPause ? kLookPausePeriods : kLookBesidePeriods + 1;
    const bool read = stage_periods - look_left_ >= 1;  // not the first of a stage: the change's
    for (int k = 0; k < period.count; ++k) {
      const PeerPeriod& p = period.peers[k];
      Seen& seen = Record(p);
      if (!seen.in_look) continue;
      if (p.launches == 0) {  // it rested
        seen.in_look = false;
        continue;
      }
      reading = true;
      if (read) (look_ == Look::kPause ? seen.alone : seen.beside).Add(static_cast<double>(p.launches));
    }
  }
  if (!reading) {
    GiveUpLook();
    return false;
  }
  d->rate_permille = rate_;
  if (--look_left_ > 0) {
    d->probe_pause = look_ == Look::kPause;
    return true;
  }
  if (look_ == Look::kPause) {
    look_ = Look::kAfter;
    look_left_ = kLookBesidePeriods + 1;
    return true;
  }
  look_ = Look::kNone;
  EndLook(d);
  return true;
}

void MpsController::EndLook(ControlDecision* d) {
  for (Seen& seen : seen_) {
    if (!seen.in_look) continue;
    seen.in_look = false;
    const Sums& b = seen.beside;
    const Sums& a = seen.alone;
    if (b.n < 2 || a.n < 1 || a.mean() <= 0 || b.mean() <= 0) continue;
    const double floor = seen.floor_permille > 0 ? seen.floor_permille / 1000.0 : 1;
    const double level = b.mean() / a.mean() / floor;
    // The periods' relative spread, pooled over both sides.
    const uint32_t dof = b.n + a.n - 2;
    const double relative = dof > 0 ? ((b.n - 1) * b.variance() / (b.mean() * b.mean()) +
                                       (a.n - 1) * a.variance() / (a.mean() * a.mean())) / dof
                                    : 0;
    const double error = std::max(level * std::sqrt(relative * (1.0 / b.n + 1.0 / a.n)), kMinOneLookError);
    if (seen.look_rate != rate_) seen.looks_count = seen.looks_next = 0;
    seen.look_rate = rate_;
    seen.looks[seen.looks_next] = level;
    seen.look_errors[seen.looks_next] = error;
    seen.looks_next = (seen.looks_next + 1) % kLooks;
    if (seen.looks_count < kLooks) ++seen.looks_count;
    double mean = 0, spread = 0;
    LookLevel(seen, &mean, &spread);
    AddTrace(d, "compute: mps: a look: guaranteed job launched %.0f a period beside work at %u permille, %.0f alone: "
             "%.3f of its floor (%.3f +- %.3f over %u looks)",
             b.mean(), rate_, a.mean(), level, mean, spread, seen.looks_count);
  }
  // A cut on trial: where the first look at the new rate still says the job is under its floor
  // with confidence, and no higher than the looks that made the cut (by kBoughtMargin, or by
  // their noise where that is more), holding back bought nothing: the rate goes back, as after
  // a window's futile cut, and no look cuts for hold_ns_ (a look far under still does). The
  // job has a look at the new rate once its looks are at rate_ (the cut left them at the old).
  double trial_mean = 0, trial_error = 0;
  if (trial_.open && trial_.by != nullptr && LookLevel(*trial_.by, &trial_mean, &trial_error) &&
      UndoFutileCut(trial_mean, trial_error, trial_mean + kLookZ * trial_error < 1, d)) {
    return;
  }
  // The rate judged on every job's looks at it: cut where one is under its floor with
  // confidence (in proportion, as on a window), grown where all are above it.
  Seen* lowest = nullptr;
  double lowest_mean = 2, lowest_error = 0;
  bool all_above = true, any = false;
  for (uint32_t k = 0; k < active_count_; ++k) {
    Seen& seen = *active_[k];
    double mean = 0, error = 0;
    if (!seen.by_progress || !LookLevel(seen, &mean, &error)) continue;
    any = true;
    all_above &= mean >= 1 + kGrowMargin;
    if (mean + kLookZ * error < lowest_mean + kLookZ * lowest_error) {
      lowest = &seen;
      lowest_mean = mean;
      lowest_error = error;
    }
  }
  const bool held = now_ns_ < hold_until_ns_ && lowest_mean >= 1 - kCutNowMargin;
  if (lowest != nullptr && lowest_mean + kLookZ * lowest_error < 1 && !held) {
    const uint32_t next = CutRate(1 - lowest_mean);
    AddTrace(d, "compute: mps: guaranteed job at %.3f of its floor by its looks (at most %.3f): rate %u -> %u permille",
             lowest_mean, lowest_mean + kLookZ * lowest_error, rate_, next);
    Cut(next, lowest, {.mean = lowest_mean, .error = lowest_error, .by = lowest});
  } else if (any && all_above && rate_ < 1000) {
    // Above it with confidence: the rate doubles, as a cut on a shortfall of a tenth halves it.
    const bool sure = lowest_mean - kLookZ * lowest_error >= 1 + kGrowMargin;
    char why[96];
    snprintf(why, sizeof why, "guaranteed job above its floor by its looks (%.3f, at least %.3f)", lowest_mean,
             lowest_mean - kLookZ * lowest_error);
    Grow(d, why, sure ? kSureGrowFactor : kGrowFactor);
    StartOver();
    trial_.open = false;
  }
  d->rate_permille = rate_;
}

ControlDecision MpsController::Decide(const ControlPeriod& period, int64_t now_ns) {
  // The period just measured ran at ran_rate_ (or paused): how many in a row ran so.
  const bool ran = !ran_paused_ && period.wanted;
  steady_ = ran && ran_rate_ == steady_rate_ ? steady_ + 1 : ran ? 1 : 0;
  steady_rate_ = ran ? ran_rate_ : kNoRate;
  const ControlDecision d = Judge(period, now_ns);
  ran_rate_ = d.rate_permille;
  ran_paused_ = d.probe_pause;
  return d;
}

ControlDecision MpsController::Judge(const ControlPeriod& period, int64_t now_ns) {
  ControlDecision d;
  // Forget peers that are gone, so that their records serve new ones.
  for (Seen& seen : seen_) {
    bool present = false;
    for (int k = 0; k < period.count && !present; ++k) present = period.peers[k].id == seen.id;
    if (present) continue;
    if (trial_.by == &seen) trial_.open = false;
    seen = {};
  }
  // Readings of this period, judged against each peer's own floor; the rate settled beside
  // the peers busy now.
  double worst = 2;  // the lowest reading over its floor; 2: none
  Seen* worst_by = nullptr;
  double worst_founded = 2;  // ... of those from peers that do not want a baseline
  Seen* worst_founded_by = nullptr;
  bool wants_baseline = false;
  bool wants_alone = false;
  bool pending = false;  // a peer gathers samples beside opportunistic work for a reading
  bool looked = false;   // a peer is judged by looks
  bool urgent = false;   // ... and its reading says it is far under its floor
  uint32_t settled = 1000;
  active_count_ = 0;
  now_ns_ = now_ns;
  for (int k = 0; k < period.count; ++k) {
    const PeerPeriod& p = period.peers[k];
    Seen& seen = Record(p);
    const KernelSignal s = UnpackKernelSignal(p.kernel_signal);
    const bool fresh = s.sequence != 0 && s.sequence != seen.sequence;
    seen.sequence = s.sequence;
    seen.floor_permille = p.floor_permille;
    if (seen.busy_at_ns >= 0 && now_ns - seen.busy_at_ns > kKeepRateNs) seen.rate = 1000;  // the job may be another
    // Busy: work queued, launches, or a reading (or one on the way). Not a fresh signal alone:
    // a resting job's gate thread publishes one, with no reading, every period, and counting it
    // busy held the rate settled beside it over every other job (on an H200 one opportunistic
    // process, cut for a job at 0.97, stayed at 625 permille beside jobs at 0.90 and 0.80 that
    // lost nothing, and harvested 0.66 of solo at each, where plain MPS harvested 0.95).
    if (p.busy_ns > 0 || p.launches > 0 || (fresh && (s.known() || s.pending))) seen.busy_at_ns = now_ns;
    if (seen.busy_at_ns >= 0 && now_ns - seen.busy_at_ns <= kActiveNs) {
      active_[active_count_++] = &seen;
      settled = std::min(settled, seen.rate);
    }
    // Its launches in this period, for the next look, where it ran at the rate as the one before.
    if (steady_ >= 2 && ran_rate_ == rate_ && p.launches > 0) {
      seen.recent[seen.recent_next] = p.launches;
      seen.recent_next = (seen.recent_next + 1) % kLookBesidePeriods;
      if (seen.recent_count < kLookBesidePeriods) ++seen.recent_count;
    } else {
      seen.recent_count = seen.recent_next = 0;
    }
    // A period with no reading and no word of a loop says nothing (time alone, a short stretch).
    if (fresh && (s.known() || s.by_progress)) seen.by_progress = s.by_progress;
    const double floor = p.floor_permille / 1000.0;
    const double ratio = (s.speed_permille / 1000.0) / (floor > 0 ? floor : 1);  // the reading over its floor
    if (Looked(seen, period)) {
      looked = true;
      // Its looks judge it, not its readings: those are against a rate alone from short pauses
      // on a host that moves. One far under its floor calls a look early.
      if (fresh && s.known() && ratio < 1 - kCutNowMargin) urgent = true;
      continue;
    }
    if (!fresh) continue;
    wants_baseline |= s.wants_baseline;
    wants_alone |= s.wants_alone;
    pending |= s.pending;
    if (!s.known()) continue;
    if (ratio < worst) {
      worst = ratio;
      worst_by = &seen;
    }
    if (!s.wants_baseline && ratio < worst_founded) {
      worst_founded = ratio;
      worst_founded_by = &seen;
    }
  }
  // A look is of the rate beside the jobs busy now: where another's settled rate holds now, it
  // is given up.
  if (look_ != Look::kNone && settled != rate_) GiveUpLook();
  if (LookPeriod(period, &d)) return d;
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
  if (looked && StartLook(period, urgent, &d)) return d;
  if (worst >= 2) {
    // A reading that is pending is coming: opportunistic work is beside the guaranteed
    // kernels, only not yet often enough to read. A job judged by looks is read by them, at
    // any rate but none.
    const bool coming = pending || (looked && rate_ > 0);
    if (coming) quiet_ = 0;
    if (rate_ < 1000 && period.wanted && !coming && ++quiet_ >= kQuietPeriods) {
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
  // The mean's standard error, from the readings' sample standard deviation.
  const double error = Spread(judged_, judged_count_, mean) / std::sqrt(static_cast<double>(judged_count_));
  // The mean's upper bound: under the floor, the shortfall is more than the window's noise.
  const double upper = mean + kCutConfidenceT * error;
  const bool full = judged_count_ >= kJudgePeriods;
  const bool under = full && upper < 1;
  if (full && trial_.open && trial_.by == nullptr) {
    // The first full window since the last cut: did holding back buy anything?
    if (UndoFutileCut(mean, error, under, &d)) return d;
  }
  // One reading cuts at once only where its job trusts it: one that wants a baseline (too few
  // of its kernels have a time alone, or it is stale) is judged in the window, with the others.
  const bool far_under = worst_founded < 1 - kCutNowMargin;
  if (far_under || (under && now_ns >= hold_until_ns_)) {
    // In proportion to the shortfall: a reading's error is some hundredths, and a cut on a
    // shortfall that small is as likely noise as not.
    const uint32_t next = CutRate(1 - (far_under ? worst_founded : mean));
    AddTrace(&d, "compute: mps: guaranteed kernels at %.3f of their floor (%.3f over %u periods, at most %.3f): rate %u -> %u permille",
             far_under ? worst_founded : worst, mean, judged_count_, upper, rate_, next);
    Cut(next, far_under ? worst_founded_by : worst_by, {.mean = mean, .error = error});
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
