// The opportunistic rate controller for a GPU shared through MPS. Processes' kernels run at
// the same time on different SMs, opportunistic ones at below-normal MPS client priority, so
// the hardware scheduler already favours guaranteed kernels; opportunistic work costs a
// guaranteed job only what the shared SMs, memory and caches cost its kernels. So the
// controller starts opportunistic work unthrottled, as plain MPS at priority 1 runs it, and
// holds it back only when a guaranteed job's own kernels say its floor is broken.
//
// The signal is each guaranteed process's reading, published once per period in its compute
// entry: its sampled kernels' GPU time beside opportunistic work against the same kernels alone
// (kernel_clock.h), or, for a job that launches without pause, its launch rate beside against
// alone, or, for one whose host keeps busy, its share of time not waiting on the GPU beside
// against alone (progress_clock.h, PeriodSpeed); readings over 1, noise about a job that loses
// nothing, are published up to kMaxSpeedPermille, so that a window's mean is not biased low.
// Each period:
//  - no guaranteed peer busy: no limit. The rate is where it settled beside the guaranteed jobs
//    busy now (those busy within kActiveNs): each job keeps the rate last settled beside it
//    while it is busy, and for kKeepRateNs after, and beside several the lowest of theirs
//    holds; beside a job with none kept, no limit. So a busy stretch starts where the last one
//    beside the same job settled rather than unthrottled: each cut halves, so from no limit the
//    rate needs a reading per halving (on an H200 a GPU-bound guaranteed job beside matrix
//    products lost its first 2 s of every stretch to that ramp, 0.86 of its speed alone over
//    5 s phases). And a rate settled beside one job is not carried to another: a cut made for
//    a job at 0.97 held back work beside one at 0.90 until growth undid it a quarter a second
//    (on an H200 one opportunistic process beside ResNet-50 at 0.97 in turn with 0.90 and
//    0.80 harvested 0.731 at 0.90, where plain MPS at priority 1, which kept the level,
//    harvested 1.022);
//  - a peer that wants a baseline (too few of its kernels have one, or it is stale) gets a
//    probe: opportunistic work pauses for kProbePeriods, at most once per kMinProbeGapNs;
//    one that wants time alone only to renew the references of its reading by launches or
//    waits (KernelSignal::wants_alone) gets one the same way only while the readings since the
//    rate last changed are within kRenewMargin of the floor (their mean, or fewer than
//    kGrowPeriods of them): far above it, a reference a few seconds older cannot move the
//    judgement, and each pause costs opportunistic work a period (on an H200, where plain MPS
//    kept ResNet-50 at 1.03 of solo beside BERT training, the job's 65 asks in 420 periods, 38
//    of them renewals, kept BERT paused a period in every 4 s, about half of the 0.11 of the
//    harvest gslice gave away there);
//  - the floor is judged over kJudgePeriods readings (2 s), the level being a job's speed over
//    a window, not in every 250 ms: where their mean is under it with confidence (the mean
//    plus kCutConfidenceT standard errors, from the window's own spread, Student's t for
//    kJudgePeriods - 1 degrees of freedom at one-sided 95%), or one reading is under it by
//    more than kCutNowMargin, the rate is cut in proportion to the shortfall, by kCutGain
//    times it (the window's mean under the floor, or that reading's), to kCutFactor of itself
//    at most (under kMinRatePermille: 0), and the readings start over (the next judgement is
//    of 2 s at the new rate; a window judged on fewer readings would be the noise of one
//    period again, as "two periods in a row" was). A reading's error is some hundredths (on
//    an H200, ResNet-50's readings by its launches sat 0.06-0.08 from its speed over whole
//    phases), so a shortfall of 1-3% is as often the reading's as the job's; halving on it
//    held opportunistic work back for the four seconds growth takes (one opportunistic process
//    harvested 0.731 of solo where plain MPS, keeping ResNet-50 at 0.907 of solo at a 0.90
//    floor, harvested 1.022; its cuts came at window means of 0.92-0.99 of the floor). A cut
//    of a tenth on a 2% shortfall costs a tenth as much, and a shortfall of 10% or more
//    still halves;
//    A job at its floor has window means under it half the time by chance, and a cut made on
//    such a mean is undone by the next readings above it: it costs opportunistic work and
//    buys the job nothing. Only a shortfall larger than the window's own noise is one that
//    holding opportunistic work back can be seen to buy back;
//    One period's reading is noisy, and short dips are real but do not move the level: ResNet-50
//    bf16 beside BERT training on an H200 read 0.80-0.86 for two or three periods at a time in
//    a pass where it ran at 1.04 of its speed alone overall, and plain MPS at priority 1 (which
//    never reacts) kept it at 0.96;
//  - a cut is a trial: where the first full window at the new rate is still under the floor
//    with confidence and its mean no higher than the window that made the cut (by
//    kBoughtMargin, or by the two windows' noise where that is more), holding opportunistic
//    work back bought the job nothing, and the rate goes back to where it was, with no cut on a
//    window's mean for kHoldNs (doubling, to kMaxHoldNs, while cuts keep buying nothing; back
//    to kHoldNs after one that buys something). A reading under the floor that no rate moves is
//    not opportunistic work's doing: a reference alone from a host that has since slowed, the
//    job's own phase, or a host too busy for both jobs' threads. On an H200 where plain MPS at
//    priority 1 kept ResNet-50 at 0.906 of its speed alone beside BERT training, gslice at
//    0.90 kept it at 0.930 and harvested 0.10 less than plain MPS: its readings moved 0.08 with
//    the host, and each halving on such a reading held BERT back for the four seconds growth
//    takes. Where opportunistic work does cost the job (the same pair on a slower host: the
//    job at about 0.96 - 0.28 x the harvest), a cut buys its share back and is kept;
//  - the readings since the rate last changed, at least kGrowPeriods of them (1 s), whose mean
//    is at or above the floor (plus kGrowMargin) let the rate grow by kGrowFactor, at least
//    kGrowStepPermille, up to no limit, and the readings start over as after a cut. Growth is
//    judged on a mean as the cut is, so a rate where the job sits at its floor is held: a job
//    at its floor reads above it in about half its periods, and when one such reading grew the
//    rate, every cut was undone within a second (ResNet-50 bf16 beside BERT training on an
//    H200, floor 0.97: 500 -> 625 -> 781 -> 976 -> 1000 permille in four periods, 8-11 cuts a
//    minute, the job at 0.91-0.93 of solo); a mean over fewer periods than the cut's window
//    keeps the way back from a cut that bought nothing short;
//  - while throttled, kQuietPeriods in a row with no new reading (opportunistic work held back
//    too far to be beside the guaranteed kernels) grow the rate as a reading above the floor
//    would: the next reading tells. (One period without one is the two clocks' phase.) A
//    period in which a peer's reading is pending (kernel_clock.h: samples beside opportunistic
//    work, too few yet) is not such a period: the reading is coming. Only
//    periods in which this process wanted the GPU count: one that does not launch is not held
//    back, and its rate stays where the readings left it until it launches again;
//  - nor is it judged: a guaranteed job's readings while this process does not launch (or wait
//    at its gate) are not its doing, and cutting it for another opportunistic process's work
//    would start it throttled when it comes back (in the frontier each configuration's
//    opportunistic process rests while another runs beside the same guaranteed jobs, and its
//    controller went on judging their readings);
// So where the floor holds with opportunistic work unthrottled, nothing is ever held back, and
// where it does not, opportunistic work is held back only while that is seen to buy the job's
// speed back.
// Pure (controller.h).
#pragma once

#include <cstdint>

#include "controller.h"

namespace gslice::compute {

inline constexpr uint32_t kProbePeriods = 1;
inline constexpr int64_t kMinProbeGapNs = 4'000'000'000;
inline constexpr double kRenewMargin = 0.10;
inline constexpr uint32_t kJudgePeriods = 8;
inline constexpr double kCutNowMargin = 0.20;
// Student's t at one-sided 95% for kJudgePeriods - 1 = 7 degrees of freedom.
inline constexpr double kCutConfidenceT = 1.895;
inline constexpr double kCutFactor = 0.5;
inline constexpr double kCutGain = 5;
inline constexpr uint32_t kMinRatePermille = 20;
inline constexpr double kGrowMargin = 0.01;
inline constexpr uint32_t kGrowPeriods = 4;
inline constexpr double kGrowFactor = 1.25;
inline constexpr uint32_t kGrowStepPermille = 50;
inline constexpr uint32_t kQuietPeriods = 4;
inline constexpr double kBoughtMargin = 0.02;
inline constexpr int64_t kHoldNs = 8'000'000'000;
inline constexpr int64_t kMaxHoldNs = 64'000'000'000;
// A guaranteed job idle this long: the rate settled beside it is forgotten, and the next busy
// stretch beside it starts unthrottled (the job that comes may be another).
inline constexpr int64_t kKeepRateNs = 60'000'000'000;
// A guaranteed job not busy for this long is not one the rate is held for.
inline constexpr int64_t kActiveNs = 1'000'000'000;

class MpsController {
 public:
  // One period's decision at now_ns (the gate's clock; only differences are used).
  // REQUIRES: called once per kControlPeriodNs.
  ControlDecision Decide(const ControlPeriod& period, int64_t now_ns);
  // The rate while guaranteed work is busy (kept while it is idle).
  uint32_t rate_permille() const { return rate_; }
  bool probing() const { return probe_left_ > 0; }

 private:
  // What this controller keeps of each guaranteed peer: its newest reading, when it was last
  // busy, and the rate last settled beside it.
  struct Seen {
    int id = -1;
    uint64_t owner = 0;
    uint32_t sequence = 0;
    int64_t busy_at_ns = -1;  // -1: never
    uint32_t rate = 1000;
  };
  // p's record (a new one for a peer not seen before).
  Seen& Record(const PeerPeriod& p);
  // After the rate changed from `from`: a cut is settled beside the peer whose reading made
  // it (cut_by), growth beside every peer busy in this period that had less.
  void Settle(uint32_t from, Seen* cut_by);
  // The mean of the readings judged since the rate last changed.
  // REQUIRES: judged_count_ > 0.
  double JudgedMean() const;
  void Grow(ControlDecision* d, const char* why);
  // Empties the window of readings judged (the next judgement is of readings from now on).
  void StartOver() { judged_count_ = judged_next_ = 0; }

  uint32_t rate_ = 1000;
  uint32_t probe_left_ = 0;
  int64_t last_probe_ns_ = 0;  // 0: never
  // The newest readings (each period's lowest over its floor), at most kJudgePeriods: a ring
  // from index 0, emptied by setting both counts to 0.
  double judged_[kJudgePeriods] = {};
  uint32_t judged_count_ = 0, judged_next_ = 0;
  // The last cut, on trial until the first full window of readings after it: the rate it was
  // made from and the mean and standard error of the window that made it.
  struct Trial {
    bool open = false;
    uint32_t from_rate = 1000;
    double mean = 0, error = 0;
  };
  Trial trial_;
  int64_t hold_until_ns_ = 0;  // no cut on a window's mean before this
  int64_t hold_ns_ = kHoldNs;  // the next hold's length
  uint32_t quiet_ = 0;         // periods in a row with no new reading
  bool idle_ = false;           // no guaranteed peer was busy in the last period
  Seen seen_[kMaxControlledPeers];
  Seen* active_[kMaxControlledPeers] = {};  // this period's peers busy within kActiveNs
  uint32_t active_count_ = 0;
  int64_t now_ns_ = 0;  // this period's
};

}  // namespace gslice::compute
