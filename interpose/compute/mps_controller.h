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
//    more than kCutNowMargin (one its job trusts: a reading that asks for a baseline, too few
//    of its kernels having a time alone, is judged in the window; on an H200 one such, 0.70
//    from seven kernels in ResNet-50's warm-up, halved the rate in its first second), the
//    rate is cut in proportion to the shortfall, by kCutGain
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
//  - a loop whose launches per second are its speed (one read by its launches or its host's
//    waits, or that launches so without a reference alone yet; KernelSignal::by_progress), with
//    no other opportunistic process running, is judged by looks, not by its readings: this
//    process pauses for kLookPausePeriods, and the job's launches per period (its gate thread
//    publishes its count in its compute entry) in the pause are its speed alone, those in the
//    kLookBesidePeriods at the rate before and after the pause its speed beside (the first
//    period of each side of the change not read: work still queued, and the burst of a
//    resumed queue). Their ratio over its floor is the look's level, with a standard error
//    from the periods' spread; the mean of a rate's newest kLooks looks is the job's level at
//    that rate. Under the floor with confidence (kLookZ standard errors), the rate is cut in
//    proportion as on a window, and the cut is on trial as a window's is: where the first look
//    at the new rate is still under the floor with confidence and no higher, the rate goes
//    back and no look cuts for the hold (one look's error is at least kMinOneLookError); all
//    jobs' looks above it by kGrowMargin, it grows (doubles, kSureGrowFactor, where they are
//    above it with confidence). Why: a reading's reference alone is taken in short pauses
//    some seconds earlier on a host that moves, and sat 0.06 over the job's speed
//    in one call on an H200 and 0.11 under it in the next (ResNet-50 bf16 beside BERT training,
//    plain MPS at priority 1 keeping it at 0.90-0.91 of solo); held to a 0.90 floor on such
//    readings, opportunistic work harvested 0.27-0.30 of solo less than plain MPS. A look's
//    speeds alone and beside come from the same two seconds, so a host that moves over minutes
//    moves both, and the ratio is what holding this process back buys the job (on an H200,
//    ResNet-50 bf16 beside BERT training at no limit: looks read 0.918 and 0.945 of alone on
//    average, one look's spread 0.04-0.05, where plain MPS ran it at 0.934). A look is due
//    kUrgentLookGapNs after the rate changes or a reading says the job is far under its floor,
//    kLookGapNs after the rate's first look, and twice as long after each more while the mean
//    of the rate's looks holds the floor, to kFarLookGapNs (kLookGapNs again once it does not):
//    looks every kLookGapNs cost 9-12% of the time (8 looks in 48 s at 0.90 on an H200, where
//    rounds after the first harvested 0.917 against plain MPS's 1.033), and a job that holds
//    its floor look after look is the one where a look most seldom changes anything. A job
//    that falls under its floor between two looks far apart is seen at the next: where it
//    falls far (kCutNowMargin), its readings call that look early. A look is given up where
//    this process stops launching, the job rests, or the rate settled beside another job
//    holds. A server's
//    launches follow its requests, not its speed: it is read by its kernels, and judged on its
//    readings;
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
// Looks (a loop, KernelSignal::by_progress, the only opportunistic process running): a
// pause of kLookPausePeriods, the first the change's and not read, and kLookBesidePeriods at the
// rate either side of it, the first after it not read either.
inline constexpr uint32_t kLookPausePeriods = 3;
inline constexpr uint32_t kLookBesidePeriods = 4;
// Between the starts of two looks: after the rate's first look, or while its looks say the job
// is under its floor; the most, reached by doubling while they say it holds it; and before the
// rate's first look or where a reading says the job is far under its floor (kCutNowMargin).
inline constexpr int64_t kLookGapNs = 8'000'000'000;
inline constexpr int64_t kFarLookGapNs = 32'000'000'000;
inline constexpr int64_t kUrgentLookGapNs = 2'000'000'000;
inline constexpr uint32_t kLooks = 4;
// Under the floor with confidence: the looks' mean plus kLookZ of its standard errors (one-sided
// 95%), at least kMinLookError (the periods' launches are not independent samples).
inline constexpr double kLookZ = 1.645;
inline constexpr double kMinLookError = 0.01;
// One look's standard error at least: its periods' spread understates it, as the job's phase
// and the host move between looks (on an H200, ResNet-50 bf16 beside BERT training: one look's
// own error 0.014-0.07, the spread of looks at one rate 0.04-0.10).
inline constexpr double kMinOneLookError = 0.04;
// Growth where the looks say the job is above its floor with confidence.
inline constexpr double kSureGrowFactor = 2;

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
  struct Sums {
    double sum = 0, squares = 0;
    uint32_t n = 0;
    void Add(double x) { sum += x, squares += x * x, ++n; }
    double mean() const { return n > 0 ? sum / n : 0; }
    // The sample variance (0 under two samples).
    double variance() const;
  };
  struct Seen {
    int id = -1;
    uint64_t owner = 0;
    uint32_t sequence = 0;
    int64_t busy_at_ns = -1;  // -1: never
    uint32_t rate = 1000;
    uint32_t floor_permille = 0;
    // It is a loop whose launches are its speed, as it last said (KernelSignal::by_progress).
    bool by_progress = false;
    // Its launches in the newest periods in a row at rate_ (a ring from index 0), launching in
    // each (a job that launches without pause may keep nothing queued most of the time: its
    // GPU waits on its host).
    uint64_t recent[kLookBesidePeriods] = {};
    uint32_t recent_count = 0, recent_next = 0;
    // The look under way: its launches per period beside (at rate_) and alone; in_look: it was
    // read from the look's start, busy in every period so far.
    bool in_look = false;
    Sums beside, alone;
    // Its newest looks' levels (speed beside over alone, over its floor) at look_rate, with
    // their standard errors: a ring from index 0.
    double looks[kLooks] = {}, look_errors[kLooks] = {};
    uint32_t looks_count = 0, looks_next = 0;
    uint32_t look_rate = 1000;
  };
  enum class Look { kNone, kPause, kAfter };
  // p's record (a new one for a peer not seen before).
  Seen& Record(const PeerPeriod& p);
  // After the rate changed from `from`: a cut is settled beside the peer whose reading made
  // it (cut_by), growth beside every peer busy in this period that had less.
  void Settle(uint32_t from, Seen* cut_by);
  // The mean of the readings judged since the rate last changed.
  // REQUIRES: judged_count_ > 0.
  double JudgedMean() const;
  // The rate times factor (at least kGrowStepPermille more), to no limit.
  void Grow(ControlDecision* d, const char* why, double factor = kGrowFactor);
  // Judges the cut on trial on the first mean at the new rate (and its standard error; under:
  // under the floor with confidence): where it bought nothing (still under, and the mean no
  // higher than the one that made the cut, by kBoughtMargin or their noise), the rate goes
  // back, cuts (on a window's mean, or on looks for a trial by looks) are held for hold_ns_,
  // and it returns true.
  bool UndoFutileCut(double mean, double error, bool under, ControlDecision* d);
  // Decide, given steady_.
  ControlDecision Judge(const ControlPeriod& period, int64_t now_ns);
  // Whether p's job is judged by looks: a loop (KernelSignal::by_progress), with no other
  // opportunistic process running on the GPU (a pause of this one alone would not be time
  // alone; one that is there but idle is no matter).
  bool Looked(const Seen& seen, const ControlPeriod& period) const {
    return seen.by_progress && !period.opportunistic_busy;
  }
  // Starts a look where one is due (returns whether it did).
  bool StartLook(const ControlPeriod& period, bool urgent, ControlDecision* d);
  // Ends the look under way, if any, judging nothing.
  void GiveUpLook();
  // A period of the look under way; returns whether it is still under way.
  bool LookPeriod(const ControlPeriod& period, ControlDecision* d);
  // Ends the look: each peer's level into its ring, and the rate judged on them.
  void EndLook(ControlDecision* d);
  // The mean of seen's looks at rate_ and its standard error (returns false where it has none).
  bool LookLevel(const Seen& seen, double* mean, double* error) const;
  // Empties the window of readings judged (the next judgement is of readings from now on).
  void StartOver() { judged_count_ = judged_next_ = 0; }

  uint32_t rate_ = 1000;
  uint32_t probe_left_ = 0;
  int64_t last_probe_ns_ = 0;  // 0: never
  // The newest readings (each period's lowest over its floor), at most kJudgePeriods: a ring
  // from index 0, emptied by setting both counts to 0.
  double judged_[kJudgePeriods] = {};
  uint32_t judged_count_ = 0, judged_next_ = 0;
  // The last cut, on trial until the first full window of readings after it (or, for a cut
  // by looks, the first look at the new rate of the job whose looks made it, `by`): the rate
  // it was made from and the mean and standard error of the window (or looks) that made it.
  struct Trial {
    bool open = false;
    uint32_t from_rate = 1000;
    double mean = 0, error = 0;
    const Seen* by = nullptr;  // null: a window's
  };
  Trial trial_;
  // The rate cut in proportion to a shortfall under the floor: by kCutGain times it, to
  // kCutFactor of itself at most (under kMinRatePermille: 0).
  uint32_t CutRate(double shortfall) const;
  // Cuts the rate to next, settled beside `by` (the job whose reading or looks made the cut),
  // and puts the cut on trial against `trial`'s mean and error (and job, for looks).
  void Cut(uint32_t next, Seen* by, Trial trial);
  int64_t hold_until_ns_ = 0;  // no cut on a window's mean (or on looks) before this
  int64_t hold_ns_ = kHoldNs;  // the next hold's length
  uint32_t quiet_ = 0;         // periods in a row with no new reading
  bool idle_ = false;           // no guaranteed peer was busy in the last period
  Seen seen_[kMaxControlledPeers];
  Seen* active_[kMaxControlledPeers] = {};  // this period's peers busy within kActiveNs
  uint32_t active_count_ = 0;
  int64_t now_ns_ = 0;  // this period's
  // The period just measured: its rate and whether it was a pause; how many in a row before it
  // ran at the same rate (the first after a change is the change's).
  static constexpr uint32_t kNoRate = ~0u;
  uint32_t ran_rate_ = 1000;
  bool ran_paused_ = false;
  uint32_t steady_ = 0;
  uint32_t steady_rate_ = kNoRate;
  Look look_ = Look::kNone;
  uint32_t look_left_ = 0;     // the look's periods left in its stage
  int64_t last_look_ns_ = 0;   // 0: never
};

}  // namespace gslice::compute
