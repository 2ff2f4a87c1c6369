// How fast a guaranteed job that launches without pause runs beside opportunistic work on a
// GPU shared through MPS, against alone, by its own launches. Pure: the gate thread feeds it
// the job's launch count every pass (GateMode::kCount's counter) and reads it once a period.
//
// Why: the kernel reading (kernel_clock.h) is a bound on a job's loss, each GPU second of its
// kernels counted on its critical path. A job whose host thread launches without pause (a
// launch-bound training loop) loses less than its kernels slow down: measured on an H200, its
// readings beside unthrottled opportunistic work spread from 0.60 to 0.98 of alone per period
// (median about 0.90) while the job ran at 0.91-1.08 of its speed alone, so a floor of 0.90
// cut opportunistic work every few seconds where plain MPS kept the level. For such a job its
// launches per second are its speed: a step is a fixed number of launches.
//
// Which jobs: one whose launches moved in at least kSaturatedShare of the gate thread's passes
// (a pass every 200 us) alone. A server below full load idles between requests and is never
// read so (its launches follow its requests, not its speed): it keeps the kernel reading.
// Beside opportunistic work it must launch in as many passes (kSaturatedShare) to be read so: a
// job that launches in fewer waits on its kernels (or its input, a long synchronisation), so
// its kernels' times measure what it loses with no rate taken at another time, while its
// launches are judged against a rate alone taken in an earlier pause, on a host whose speed
// moves (on an H200, ResNet-50 bf16's solo speed rose from 42 to 51 steps/s over one run).
// There, beside BERT training, it launched in 57-82% of its passes, its host waited on the GPU
// 30-100 ms of each 250, its kernels read 0.83-0.97 of alone (mean 0.89) and its launches
// 0.97-1.15 (mean 1.05), and the job ran at 0.84 of its speed alone; in the periods where it
// launched in 85% or more, its launches read 0.99 and its kernels 0.98.
//
// A period's time is split pass by pass into alone (no opportunistic work queued for
// kAloneSettleNs or longer) and beside (the rest); a rest (no launch for over kRestNs) is in
// neither.
// Alone time is short (the pauses that refresh the kernels' baselines, and those the job asks
// for itself to renew its references, kAloneRenewNs: a period or less each),
// so it is kept across periods until it adds up to kMinStretchNs: that is a sample, and moves
// the job's launch rate alone (kProgressWeight per sample). A period's beside time of at least
// kMinStretchNs in which it launched without pause is a sample of its rate beside, over the
// rate alone (the same weight). The
// reading is their ratio (over 1 where the job launched faster beside than its rate alone: noise
// about a job that loses nothing, kept for the controller's mean; kernel_clock.h); none while
// the job is not saturated alone and beside, or its rate alone is older than kAloneRateFreshNs,
// or unknown.
//
// Where a job has such a reading it is the period's reading (PeriodSpeed), above the kernels'
// bound or under it. Above: the job loses less than its kernels slow down. Under: it loses time
// the bound does not count, off the GPU. The bound counts only what slower kernels cost; a host
// that launches slower beside opportunistic work (the driver's submission path, the CPU
// itself) costs a launch-bound job speed no kernel time shows. On an H200, ResNet-50 bf16
// beside BERT training read 1.000 by its kernels' times in most periods while its launches read
// 0.88-0.95 of their rate alone, and the job ran at 0.84-0.92 of its speed alone.
//
// By its host's waits. A job whose host keeps busy alone (it launches or waits on the GPU in at
// least kSaturatedShare of its time, and launches in at least kHostBoundShare of its passes:
// its host, not the GPU, sets its pace) but does not launch without pause beside opportunistic
// work (it waits on slower kernels there, and launches in fewer passes) is read by the share of
// its time its host did not wait on the GPU: (1 - w beside) / (1 - w alone), w the waits
// (CountWait) over the stretch's time. Its host does the same work per step alone and beside;
// what opportunistic work adds is time in its waits. The share alone comes from the same alone
// stretches as its launch rate, with the same weight and freshness. Why: such a job's kernels,
// timed one in 256, read 5-20% faster beside opportunistic work than alone for whole stretches,
// on an H200 ResNet-50 bf16 beside BERT training, while it ran at 0.83-0.87 of its speed alone
// (bench/results/compute-frontier-h200-2026-12-01.md); by its waits, the same four runs read
// 0.836-0.943 (their speed 0.833-0.866), from logs of every period's waits. It needs neither a
// kernel's time alone nor a launch rate, both of which move with the host. A server below full
// load is not busy alone, and a job bound by the GPU waits most of its time (its share not
// waiting is small and noisy, and its kernels' bound reads it well): both keep the kernel
// reading.
#pragma once

#include <cstdint>

#include "kernel_clock.h"

namespace gslice::compute {

inline constexpr double kSaturatedShare = 0.85;
inline constexpr double kHostBoundShare = 0.5;
// A stretch whose launching passes and waits add up to more than this share of its time had
// more than one thread launching or waiting at once (a pass with a launch in which a wait also
// ended counts twice, by at most a pass): its waits are not one host's time, and it is not read
// by them.
inline constexpr double kOneHostShare = 1.15;
inline constexpr int64_t kMinStretchNs = 100'000'000;
inline constexpr double kProgressWeight = 0.5;
// The newest rate alone is good while the job has launched for this long since (its passes
// with a launch; a rest does not age it, as it does not age the kernels' baselines). Time
// alone comes in the pauses the kernels' baselines ask for, and the pause that renews stale
// baselines (kBaselineRefreshNs) comes a period or two after they go stale: the rate taken in
// the previous pause outlives that.
inline constexpr int64_t kAloneRateFreshNs = kBaselineRefreshNs + 10'000'000'000;
// Time alone starts this long after opportunistic work was last seen queued. The moments its
// queue runs empty between its own steps, or between the bursts a cut lets through, are not
// the job's speed alone: its host still waits on work that ran beside opportunistic kernels
// (the step's synchronisation comes up to a step later). On an H200, ResNet-50 bf16 beside
// BERT training spent 40-120 ms of many periods in such moments, launching in 68-83% of its
// passes there as beside (in a pause, once settled, 83-93%); mixed into its time alone they
// made its readings by its waits 1.0-1.2 while it ran at 0.81-0.85 of its speed alone
// (bench/results/compute-frontier-h200-2026-12-01b.md). Two of that job's steps (18-25 ms).
// Such moments count as beside: they are part of how the job runs beside opportunistic work.
inline constexpr int64_t kAloneSettleNs = 50'000'000;
// A job read by its launches or its waits asks for time alone (a pause of opportunistic work,
// as for its kernels' baselines) once its references alone are this old (its passes with a
// launch since): they move with the host (on an H200 ResNet-50 bf16's solo speed moved 10-20%
// over a run), so a reading against a reference of 20 s ago is off by that drift. (A job that
// launches in 60% of its passes beside asks every 7 s; the controller pauses at most every
// kMinProbeGapNs, 4 s.)
inline constexpr int64_t kAloneRenewNs = 4'000'000'000;
// A pass later than this after the previous one is not split (the state in between is unknown).
inline constexpr int64_t kMaxPassGapNs = 5'000'000;
// A run of passes without a launch longer than this is a rest, not part of the job's work: its
// passes are left out of both stretches when the job launches again. A job that launches
// without pause alone is launching in 85-93% of passes; with a rest of seconds (between a
// server's bursts, a job waiting its turn) in its time alone, the fragments where it had just
// come back read as 8-14%, and its rate alone was dropped (on an H200, a ResNet-50 job that
// came back every minute never had a fresh one). Shorter runs stay in: a job's waits on its
// own GPU work (a step's synchronisation, which opportunistic work lengthens) are part of its
// speed, and they last milliseconds to a few hundred.
inline constexpr int64_t kRestNs = 1'000'000'000;

// A guaranteed process's reading for a period, in permille: its launch reading where it has
// one (launches_permille > 0), else its reading by its host's waits (waits_permille > 0), else
// its kernels' bound (kernel_permille; 0: none).
inline uint32_t PeriodSpeed(uint32_t kernel_permille, uint32_t launches_permille, uint32_t waits_permille = 0) {
  return launches_permille > 0 ? launches_permille : waits_permille > 0 ? waits_permille : kernel_permille;
}
// Which of them PeriodSpeed took, in the trace's words.
inline const char* PeriodSpeedSource(uint32_t launches_permille, uint32_t waits_permille) {
  return launches_permille > 0 ? "launches" : waits_permille > 0 ? "host's waits" : "kernels' times";
}

class ProgressClock {
 public:
  // One gate-thread pass at now_ns: the job's launches so far, whether opportunistic work on
  // the GPU had work queued, and the host's waits on the GPU so far, ns (-1: not counted).
  void Pass(int64_t now_ns, uint64_t launches, bool queued, int64_t waited_ns = -1);
  // Ends a period: the job's speed beside opportunistic work against alone by its launches, in
  // permille (at most kMaxSpeedPermille; 0: no reading). Its reading by its host's waits is
  // waits_reading().
  uint32_t ClosePeriod();
  // The newest period's reading by the host's waits, permille (0: none).
  uint32_t waits_reading() const { return waits_reading_; }
  // Whether the job wants time alone to renew its references (kAloneRenewNs): it has one, or,
  // with none, launched in kHostBoundShare of its passes beside (a job that never had time
  // alone in a pause would never have one), it has run kAloneRenewNs since its last time alone,
  // and the newest period had time beside opportunistic work.
  bool wants_alone() const { return wants_alone_; }
  // Whether the job is a loop whose launches are its speed: in its newest period with time
  // beside opportunistic work (kMinStretchNs), it launched in kSaturatedShare of its passes, or
  // its host launched or waited in kSaturatedShare of its time and launched in kHostBoundShare
  // of its passes. With or without a reference alone: an opportunistic controller's look
  // (mps_controller.h) takes its own. A server between requests, or a job that waits on the
  // GPU most of its time, is not.
  bool loop() const { return loop_; }
  // Forgets the launch count (the counter is not fed for a while: the next pass starts over).
  void Pause() {
    started_ = false;
    idle_alone_ = idle_beside_ = {};
  }

  // What the last ClosePeriod saw, for the trace: time alone and beside (ms), the share of
  // passes with a launch in each (permille), and whether a rate alone was fresh.
  // For a job busy alone and beside, also its launch rate beside over alone in permille
  // (launch_rate_permille; 0: none), whether or not it launched without pause.
  struct Seen {
    int64_t alone_ms = 0, beside_ms = 0;
    int alone_moved_permille = 0, beside_moved_permille = 0;
    bool fresh = false;
    uint32_t launch_rate_permille = 0;
  };
  const Seen& seen() const { return seen_; }

 private:
  struct Stretch {
    int64_t ns = 0;
    uint64_t launches = 0;
    int passes = 0;
    int moved = 0;         // passes in which the job launched
    int64_t moved_ns = 0;  // their time
    int64_t waited = 0;    // the host's waits on the GPU that ended in its passes, ns
    bool waits_known = true;
    double Rate() const { return static_cast<double>(launches) / static_cast<double>(ns); }  // per ns
    bool Moving(double share) const;
    // The host launched or waited on the GPU in at least `share` of the time, and one host
    // thread did (kOneHostShare).
    bool Busy(double share) const;
  };
  bool started_ = false;
  int64_t last_ns_ = 0;
  int64_t queued_ns_ = -1;  // the newest pass that saw opportunistic work queued (-1: none)
  uint64_t last_launches_ = 0;
  int64_t last_waited_ = -1;
  Stretch alone_;       // alone time not yet in a sample, kept across periods
  Stretch beside_;      // this period's beside time
  Stretch period_alone_;  // this period's alone time (the trace)
  // The passes without a launch since the job's last one, alone and beside: into the stretches
  // when it launches again within kRestNs, left out when later (a rest).
  Stretch idle_alone_, idle_beside_;
  double alone_rate_ = 0;  // launches per ns alone (0: unknown)
  double alone_free_ = 0;  // its time alone's share the host did not wait on the GPU (0: unknown)
  double alone_busy_rate_ = 0;  // launches per ns alone while busy (the trace; 0: unknown)
  uint32_t waits_reading_ = 0;
  bool wants_alone_ = false;
  bool loop_ = false;
  int64_t ran_since_alone_ns_ = 0;  // passes with a launch since the newest alone sample
  double ratio_ = 0;       // beside over alone (0: none yet)
  Seen seen_;
};

}  // namespace gslice::compute
