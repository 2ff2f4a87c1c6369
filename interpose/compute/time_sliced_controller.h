// The opportunistic rate controller for a GPU that time-slices processes (no MPS): the GPU
// runs one context at a time, so every moment in which opportunistic work has work queued
// beside a guaranteed job's is at most a moment that job waited. The controller judges each
// period by that overlap (OverlapSpeed: no baseline, no probes) against the guaranteed peers'
// floor, and moves two knobs (ControlDecision): the gap level, then the rate.
//
// Each period below the floor costs the guaranteed job a context switch per opportunistic
// kernel, and a saturating guaranteed job leaves opportunistic work almost nothing at any
// level while each level tried costs it a period below the floor. So a busy stretch starts
// from the safe end (rate 0, gap start_gap_ns: only idle stretches that long are entered),
// moves one step towards more sharing only after the guaranteed jobs held for hold_periods,
// and every shortfall doubles that wait (up to kMaxHoldPeriods): the controller settles where
// the jobs hold instead of sawing around the floor. Backing off is multiplicative, advancing
// additive. Pure (controller.h).
#pragma once

#include <cstdint>

#include "controller.h"

namespace gslice::compute {

inline constexpr uint32_t kRateStepPermille = 25;  // additive increase of the rate per step
inline constexpr int64_t kGapStepNs = 1'000'000;   // the gap level's unit and additive step
inline constexpr int64_t kMaxGapNs = kProbeGapNs;  // the most conservative gap level
// The longest wait between steps towards more sharing: 4 s, long enough that a job which
// saturates the GPU is tested about once per 4 s for a level that costs it speed.
inline constexpr uint32_t kMaxHoldPeriods = static_cast<uint32_t>(4'000'000'000 / kControlPeriodNs);

struct TimeSlicedTuning {
  uint32_t step_permille = kRateStepPermille;  // additive increase per step
  int64_t start_gap_ns = 4 * kGapStepNs;       // the gap when guaranteed work becomes busy
  uint32_t hold_periods = 4;  // periods that must hold before a step towards more sharing ...
  bool backoff = true;        // ... doubled by every shortfall (up to kMaxHoldPeriods)
};

// Where the controller stands: the two knobs and its waits.
struct OpportunisticLevel {
  uint32_t rate_permille = 0;
  int64_t gap_ns = 0;
  uint32_t held = 0;  // consecutive periods that held, not yet acted on
  uint32_t hold = 0;  // periods that must hold before the next step towards more sharing (0: 1)
  bool operator==(const OpportunisticLevel&) const = default;
};

// One step. Guaranteed speed below floor: the rate halves (under 10 permille: 0); at rate 0
// the gap doubles (1, 2, 4 ... kMaxGapNs); with tuning.backoff the wait before the next step
// towards more sharing doubles. Speed holds (for cur.hold periods in a row): the gap shrinks
// by kGapStepNs; at gap 0 the rate grows by tuning.step_permille.
OpportunisticLevel NextOpportunisticLevel(OpportunisticLevel cur, double speed, double floor,
                                          const TimeSlicedTuning& tuning);

class TimeSlicedController {
 public:
  explicit TimeSlicedController(const TimeSlicedTuning& tuning = {}) : tuning_(tuning) {}
  // One period's decision. REQUIRES: called once per kControlPeriodNs.
  ControlDecision Decide(const ControlPeriod& period);
  const OpportunisticLevel& level() const { return level_; }

 private:
  TimeSlicedTuning tuning_;
  OpportunisticLevel level_;
  bool started_ = false;  // the starting level is set for this busy stretch
};

}  // namespace gslice::compute
