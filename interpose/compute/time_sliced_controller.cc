#include "time_sliced_controller.h"

namespace gslice::compute {

OpportunisticLevel NextOpportunisticLevel(OpportunisticLevel cur, double speed, double floor,
                                          const TimeSlicedTuning& tuning) {
  if (speed < floor) {
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

ControlDecision TimeSlicedController::Decide(const ControlPeriod& period) {
  ControlDecision d;
  if (!period.guaranteed_busy) {
    // Nothing to protect: the gate lets opportunistic work run freely. The next busy stretch
    // starts from the safe end again.
    started_ = false;
    level_.held = 0;
    level_.hold = 0;
    level_.gap_ns = 0;
    d.rate_permille = level_.rate_permille;
    d.forget_budget = true;
    return d;
  }
  if (!started_) {
    started_ = true;
    level_ = {.rate_permille = 0, .gap_ns = tuning_.start_gap_ns, .held = 0, .hold = tuning_.hold_periods};
    d.rate_permille = level_.rate_permille;
    d.gap_ns = level_.gap_ns;
    AddTrace(&d, "compute: controller: guaranteed work busy; rate %u permille, gap %lld us, floor %.3f",
             level_.rate_permille, static_cast<long long>(level_.gap_ns / 1000), StrictestFloor(period));
    return d;
  }
  GuaranteedPeriod jobs[kMaxControlledPeers];
  for (int i = 0; i < period.count; ++i) {
    jobs[i] = {.launches = period.peers[i].launches, .busy_ns = period.peers[i].busy_ns,
               .overlap_ns = period.peers[i].overlap_ns};
  }
  const double speed = OverlapSpeed(jobs, period.count, period.opportunistic_peers);
  if (speed >= 0) {  // else too little busy time to say anything of the jobs' speed
    const double floor = StrictestFloor(period);
    level_ = NextOpportunisticLevel(level_, speed, floor, tuning_);
    const GuaranteedPeriod total = PeriodTotal(jobs, period.count);
    AddTrace(&d,
             "compute: controller: guaranteed speed %.3f (busy %lld ms, overlap %lld us); rate %u permille, gap %lld us, "
             "next step after %u periods, floor %.3f",
             speed, static_cast<long long>(total.busy_ns / 1'000'000), static_cast<long long>(total.overlap_ns / 1000),
             level_.rate_permille, static_cast<long long>(level_.gap_ns / 1000), level_.hold < 1 ? 1 : level_.hold, floor);
  }
  d.rate_permille = level_.rate_permille;
  d.gap_ns = level_.gap_ns;
  return d;
}

}  // namespace gslice::compute
