// Compute policy of one process (cap, share, class) and the pure decisions the launch gate
// makes from it: no driver calls, no clocks of its own, so the rules are unit-testable.
// docs/compute.md explains the design and its error bounds.
#pragma once

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
// full rate and backs off only as far as the guaranteed jobs' progress needs
// (kSpatialTuning); and queued opportunistic work does not hold guaranteed kernels back, so
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
  uint32_t below = 0;  // consecutive periods below the floor not yet acted on
  uint32_t held = 0;   // consecutive periods that held, not yet acted on
  uint32_t hold = 0;   // periods that must hold before the next step towards more sharing (0: 1)
  bool operator==(const OpportunisticLevel&) const = default;
};

// How eagerly the controller moves. Time-sliced: every period below the floor costs the
// guaranteed job a context switch per opportunistic kernel, so opportunistic work starts
// with no rate, one such period is enough to back off, and the rate grows slowly. Spatial
// (MPS): it starts free; too much opportunistic work costs the guaranteed job only a few
// percent, a single 250 ms period is within the noise of its progress, and the work it
// gives up is large, so the controller backs off after two
// periods below the floor in a row and grows the rate faster (5 points and a quarter of the
// rate per period: back from a cut to 5% within two seconds).
// Spatial sharing also backs off in proportion: the guaranteed job's loss grows about
// linearly with the opportunistic rate, so from a loss L at rate r the rate that costs it
// (1 - kGuaranteedFloor) is about r * (1 - kGuaranteedFloor) / L; the controller goes there in
// one step, cutting to no less than a quarter (a noisy period must not throw away most of
// the rate) and no more than 70%; starting free, two cuts reach 6%.
// Its baseline (the guaranteed job's progress with opportunistic work paused) is what every
// decision compares with, so there it is measured over two periods instead of one (every
// 6 s, and 1 s after every cut), and each probe replaces the last one's value.
// Time-sliced, a saturating guaranteed job gives opportunistic work almost nothing at any
// level (an H100 trace: a rate of 1-4% and gap 0 gave it 0.6% of its speed) while each
// level tried costs the guaranteed job a period below the floor. So there a busy period
// starts from the safe end (rate 0, gap 4 ms: only idle stretches that long are entered),
// moves one step towards more sharing only after the guaranteed job has held for a second,
// and every shortfall doubles that wait (up to 4 s): the controller settles where the job
// holds instead of sawing around the floor.
struct ControllerTuning {
  uint32_t start_permille;  // the rate once guaranteed work is busy (after the first probe where there is one)
  uint32_t step_permille;   // additive increase per period ...
  bool grow_quarter;        // ... plus a quarter of the rate
  uint32_t confirm;        // periods below the floor in a row before backing off
  bool proportional;       // back off in proportion to the loss (else: halve)
  uint32_t probe_periods;  // length of a baseline probe
  int64_t probe_every_ns;  // one probe per this long
  // After a cut, probe again this soon (0: at the usual time): when the whole machine slowed
  // down (the guaranteed job's own speed drifts), the cut was not the opportunistic work's
  // doing, and the fresh baseline lets the rate grow back.
  int64_t reprobe_after_cut_ns;
  double probe_weight;  // weight of a new probe in the baseline (1: it replaces the old one)
  int64_t start_gap_ns;   // the gap then
  uint32_t hold_periods;  // periods that must hold before a step towards more sharing ...
  bool backoff;           // ... doubled by every shortfall (up to kMaxHoldPeriods)
  // Judge the guaranteed jobs by OverlapSpeed (no baseline, no probes: the probe fields are
  // unused; time-sliced GPUs), else by SpatialSpeed (GuaranteedSpeed against probed
  // baselines, never below the overlap's bound).
  bool by_overlap;
};
inline constexpr uint32_t kMaxHoldPeriods = static_cast<uint32_t>(kProbeEveryNs / kControlPeriodNs);
inline constexpr ControllerTuning kTimeSlicedTuning{0,   kRateStepPermille, false, 1, false, 1, kProbeEveryNs, 0, 0.5,
                                                    4 * kGapStepNs, 4, true, true};
inline constexpr ControllerTuning kSpatialTuning{1000, 2 * kRateStepPermille, true, 2, true, 2, 6'000'000'000, 1'000'000'000, 1.0,
                                                 0, 1, false, false};

// One step of the controller. Guaranteed progress below kGuaranteedFloor of the baseline
// (measured with opportunistic work paused) for tuning.confirm periods: the rate halves (or
// is cut in proportion to the loss, tuning.proportional); at
// rate 0 the gap doubles (1, 2, 4 ... 20 ms); with tuning.backoff the wait before the next
// step towards more sharing doubles. Progress holds (for cur.hold periods in a row): the gap
// shrinks by 1 ms; at gap 0 the rate grows by tuning.step_permille. Backing off is
// multiplicative and advancing additive, so the guaranteed job spends little time below the
// floor.
inline OpportunisticLevel NextOpportunisticLevel(OpportunisticLevel cur, double progress, double baseline,
                                                 const ControllerTuning& tuning = kTimeSlicedTuning) {
  const bool holds = !(baseline > 0 && progress < kGuaranteedFloor * baseline);
  if (!holds) {
    cur.held = 0;
    if (++cur.below < tuning.confirm) return cur;
    cur.below = 0;
    if (tuning.backoff) {
      const uint32_t wait = cur.hold < 1 ? 1 : cur.hold;
      cur.hold = wait * 2 > kMaxHoldPeriods ? kMaxHoldPeriods : wait * 2;
    }
    if (cur.rate_permille > 0) {
      uint32_t next = cur.rate_permille / 2;
      if (tuning.proportional) {
        const double loss = 1.0 - progress / baseline;  // > 1 - kGuaranteedFloor here
        double factor = (1.0 - kGuaranteedFloor) / loss;
        factor = factor > 0.7 ? 0.7 : factor < 0.25 ? 0.25 : factor;
        next = static_cast<uint32_t>(cur.rate_permille * factor);
      }
      cur.rate_permille = next < 10 ? 0 : next;
    } else {
      cur.gap_ns = cur.gap_ns < kGapStepNs ? kGapStepNs : (cur.gap_ns * 2 > kMaxGapNs ? kMaxGapNs : cur.gap_ns * 2);
    }
    return cur;
  }
  cur.below = 0;
  if (++cur.held < cur.hold) return cur;
  cur.held = 0;
  if (cur.gap_ns > 0) {
    cur.gap_ns = cur.gap_ns > kGapStepNs ? cur.gap_ns - kGapStepNs : 0;
  } else {
    const uint32_t step = tuning.step_permille + (tuning.grow_quarter ? cur.rate_permille / 4 : 0);
    cur.rate_permille = cur.rate_permille + step > 1000 ? 1000 : cur.rate_permille + step;
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

// Busy and overlap summed over the jobs (judged_only: only those GuaranteedSpeed judges).
inline GuaranteedPeriod PeriodTotal(const GuaranteedPeriod* jobs, int n, bool judged_only = false) {
  GuaranteedPeriod t;
  for (int i = 0; i < n; ++i) {
    if (judged_only && !jobs[i].judged()) continue;
    t.busy_ns += jobs[i].busy_ns;
    t.overlap_ns += jobs[i].overlap_ns;
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

// Queued-ahead bound: launches may go on while the estimated queued work
// (outstanding launches x mean launch cost) stays under depth_ns. At least one launch is
// always allowed, so a kernel longer than the bound still runs.
inline bool DepthAllows(uint64_t outstanding, int64_t mean_launch_ns, int64_t depth_ns) {
  if (outstanding == 0) return true;
  return static_cast<int64_t>(outstanding) * (mean_launch_ns > 0 ? mean_launch_ns : 1) < depth_ns;
}

}  // namespace gslice::compute
