// How much opportunistic work slows a guaranteed process's kernels on a GPU shared through
// MPS, measured on the kernels themselves: each sampled kernel's GPU time beside opportunistic
// work against the same kernel's GPU time alone. Pure: no clock, driver or ledger; the launch
// gate times sampled launches with a pair of events (gate_thread.cc) and feeds them here.
//
// Why per kernel: a job's launches per busy second move with what it runs (a server's
// requests cluster, a training step's phases differ), 12-16% per 250 ms period for a bursty
// server alone, so a judgement of the whole job cannot see a 3% floor. One kernel's GPU time
// with the same grid on the same input size moves little alone; against its own time alone, a
// slowdown reads as the ratio, whatever the mix of kernels in the period.
//
// A kernel is a function with its grid and block (KernelShape): different grids of one function
// are different kernels. Its time alone (the baseline) is the median of its newest
// kBaselineSamples samples taken while no opportunistic process on the GPU had work queued
// (kBaselineSamples says why a median). A period's kernel speed r is, over its samples taken
// beside opportunistic work whose kernels have a baseline, the sum of their baselines over the
// sum of their times: 1 is as fast as alone. Fewer than kMinSignalSamples such samples: no
// reading yet; the period's samples, launches, time and waits are carried into the next, for up
// to kMaxCarriedPeriods periods, and the signal says a reading is pending
// (KernelSignal::pending). So a job whose kernels are seldom beside opportunistic work (held
// back far; few, long kernels) is read over the periods it takes, not taken for one that
// opportunistic work never comes near: on an H200 a GPU-bound job beside matrix products held
// back to 10-30% gave a reading one period in three, and each run of periods without one let
// the rate grow back into a cut.
//
// What the job loses is at most what its kernels lose on its critical path. A job whose
// kernels would keep the GPU busy a share b of the time alone loses at most b (1/r - 1) of its
// time when they take 1/r as long: the reading is 1 / (1 + b (1/r - 1)), between r and 1 (b
// is at most 1), and r itself for a job that keeps the GPU busy. So a launch-bound job (b well
// under 1), whose kernels may run slower beside opportunistic work while it loses nothing,
// is not read as losing all of it; the bound still assumes every GPU second is on the job's
// critical path, so it errs on the job's side. b is its kernels' time alone over its time
// alone: the period's launches times the mean sampled kernel time (their time beside, at most
// the period) times r, over the period less the time they lost (a job of too few launches to
// count: 1). Over the period itself it would be r for a job that keeps the GPU busy, which
// launches only r as many kernels beside as alone, and read 1 / (2 - r), not r.
//
// The critical path. Slower kernels cost the job time only where its host waits for them: in
// a synchronisation (of a stream, an event or the context, a synchronous copy), or in a launch
// that finds the driver's queue full (WaitedInAFullQueue). Where the period's timed launches
// did not find it full and the host made a waiting call, its waits w, as a share of the
// period, bound the loss too:
// the reading is 1 / (1 + min(b (1/r - 1), w)) (over 1, where the kernels read faster than
// alone: their gain is bounded by the waits as their loss is). A server bound by its host
// (Python, the launches), whose requests end in a synchronisation that finds the GPU nearly
// done, loses little however much slower its kernels run; a job that waits on the GPU most of
// the time keeps the kernel bound. Waits are summed over the process's threads and GPUs, which
// only makes w larger.
#pragma once

#include <cstdint>

namespace gslice::compute {

// A launch as the hooks see it: the function (or the graph executable) and its shape.
struct KernelShape {
  const void* function = nullptr;
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_bytes = 0;
};
// A 64-bit key of a shape (never 0).
uint64_t KernelKey(const KernelShape& shape);

// A launch whose call took kBlockedLaunchNs or longer waited for room in the driver's queue.
// A full queue is a steady state, in which every launch waits for room; a host's scheduling
// stretches a single launch now and then, and one long launch among a period's twenty-odd
// timed ones cannot tell the two apart. So a period's launches found the queue full where at
// least one in kBlockedLaunchShare of its timed launches took that long.
inline constexpr int64_t kBlockedLaunchNs = 200'000;
inline constexpr uint64_t kBlockedLaunchShare = 4;
inline bool WaitedInAFullQueue(uint64_t timed_launches, uint64_t long_launches) {
  return long_launches > 0 && long_launches * kBlockedLaunchShare >= timed_launches;
}

// Whether a timed launch measured its kernel. The pair of events times from the start event to
// the end event; where the stream had run dry, the start event is done as soon as it is
// recorded and the kernel starts only once the host has launched it, so the pair times the
// launch (some 5-10 us) too. A job bound by its launches runs dry before most of its kernels
// alone and before few beside opportunistic work (it waits on slower kernels then): on an H200,
// ResNet-50 bf16 training's kernels, timed so, read up to 1.2 of their time alone beside BERT
// training while its host waited on the GPU 60-100 ms of every 250 and the job ran at 0.84 of
// its speed alone. A launch is known to have run dry where its start event was done when the
// launch returned (KernelSample::stream_dry); such a sample measures the kernel only where the
// kernel is long enough for the launch to be lost in it (kDryStreamMinNs: the launch under 1%).
inline constexpr int64_t kDryStreamMinNs = 1'000'000;
inline bool MeasuresTheKernel(bool stream_dry, int64_t gpu_ns) {
  return !stream_dry || gpu_ns >= kDryStreamMinNs;
}

inline constexpr int kKernelTableSize = 1024;  // kernels with a baseline a process keeps
// A kernel's baseline is the median of its newest kBaselineSamples samples alone (the lower
// one of the middle two where it has an even number), not their mean: one sample alone can be
// far slower than the kernel runs alone, and a mean carries it for many samples. A pair of
// events times a kernel's wait for a free SM slot with it (on an H200, a 50 us kernel behind a
// grid that held every slot read 1895 us: bench/results/compute-cupti-h200-2026-12-01.md), so
// one sample taken as the GPU's slots emptied weighs 10-100 times a sample of the kernel
// alone. With a mean (a quarter weight per new sample) such a sample keeps a tenth of itself
// in the baseline after eight more, and every period that times the kernel beside
// opportunistic work reads its kernels faster than alone. On an H200, ResNet-50 bf16 beside
// BERT training took 3 and 22 such samples alone in some 250 periods (kSlowAloneFactor): rare,
// and not what kept its readings high there (bench/results/compute-frontier-h200-2026-12-01.md),
// but each would hold a kernel's baseline up for many samples. A median of five is moved only
// where three of them are.
inline constexpr int kBaselineSamples = 5;
inline constexpr double kSlowAloneFactor = 3;
inline constexpr int kMinSignalSamples = 8;
inline constexpr int kMaxCarriedPeriods = 8;
// A baseline older than this is stale: the job may run other kernels now (a training job's
// evaluation) or other sizes; the signal asks for a fresh one (KernelSignal::wants_baseline).
// The age counts the periods in which the job ran, not the time it rested: a job that comes
// back from a rest runs the kernels it ran before (new ones have no baseline and ask for one
// anyway), so a server between bursts, or a job that waits its turn, does not cost
// opportunistic work a pause each time it comes back.
inline constexpr int64_t kBaselineRefreshNs = 20'000'000'000;
// Kernels beside opportunistic work that took, in sum, under 1 / kFasterThanAlone of their
// baselines: the baselines are wrong, not the kernels fast (sharing the GPU does not speed a
// kernel up), and the signal asks for new ones (KernelSignal::wants_baseline) until a reading is
// not. A baseline can come from samples slower than the kernel runs alone: taken while the
// GPU's clocks ramped up at the job's start, or (on the simulator, whose kernels take wall time)
// while every process on the machine started at once; one such sample made a job read 1.000 for
// the rest of its run, and it never asked for another.
// It asks once a stretch of such readings: where the kernels still read faster after
// kMinSignalSamples samples alone since it asked, the baselines are not what is wrong (a
// launch-bound job's timed kernels include the host's gaps, which move with the host), and
// asking again would only pause opportunistic work: on an H200, ResNet-50 bf16 beside BERT
// training wanted a baseline in 27-133 of some 250 periods, most of them with its kernels
// reading as fast as alone or faster, and its opportunistic peer paused 29-35 times in 112 s,
// one in every 3-4 s, the most the MPS controller allows. A reading no faster than alone ends
// the stretch.
inline constexpr double kFasterThanAlone = 1.10;
// The samples alone, of all its kernels together, a job's baselines rest on before its readings
// stand without a pause (KernelSignal::wants_baseline): as many as a reading rests on beside
// opportunistic work. One sample alone is no measure of a job's kernels alone: its first kernels
// can run slow (the GPU's clocks ramping up; on the simulator, whose kernels take wall time,
// every process on the machine starting at once), and a baseline from one such sample hides
// the slowdown opportunistic work causes for as long as the baseline stands (kFasterThanAlone
// catches it only where the kernels beside run faster still than that sample): a job that
// loses half its speed can read above its floor. The pause it asks for times its kernels
// densely alone, and their samples outweigh the first.
inline constexpr int kMinBaselineSamples = kMinSignalSamples;
// A period longer than this (no kernel was sampled for longer: the job rested) counts as this
// long, in a baseline's age and in the share of the period the job kept the GPU busy.
inline constexpr int64_t kMaxCountedPeriodNs = 1'000'000'000;

// A reading over 1 (faster than alone) is noise about a job that loses nothing, and is
// published as it is, up to kMaxSpeedPermille: the MPS controller judges a window's mean, and
// readings clipped at 1 bias it low by some 0.4 of their spread (a job at its speed alone whose
// readings spread 0.09 per period reads a mean of 0.96), under a floor of 0.97 while the job
// loses nothing: the controller cut and never found the mean above the floor to grow again.
// Clipped at 1.2 instead, such readings' mean is biased by under 0.001, and a reading from
// baselines slower than the kernels run alone (kFasterThanAlone) moves a window's mean at most
// as far up as a reading under the floor by kCutNowMargin moves it down.
inline constexpr uint32_t kMaxSpeedPermille = 1200;
// A speed in permille as a reading: truncated into [1, kMaxSpeedPermille] (0 is "no reading").
inline uint32_t SpeedReading(double permille) {
  return permille < 1                   ? 1u
         : permille > kMaxSpeedPermille ? kMaxSpeedPermille
                                        : static_cast<uint32_t>(permille);
}

// One period's reading, as published in the ledger (LedgerComputeEntry::kernel_signal):
// bits 0-10 the speed in permille (0: no reading; at most kMaxSpeedPermille), bit 11 whether
// the job wants a baseline (too few of its kernels beside opportunistic work had one, or the
// newest is stale), bit 12 whether a reading is pending
// (samples beside opportunistic work are being gathered, too few yet), bit 13 whether the job
// wants time alone to renew the references of a reading by its launches or waits
// (progress_clock.h, kAloneRenewNs), bit 14 whether the job is a loop whose launches per second
// are its speed (ProgressClock::loop, or its launches or waits gave the reading), bits 16-31 the
// period's number, never 0 once published, so a reader tells a new reading from the one it saw.
struct KernelSignal {
  uint32_t speed_permille = 0;
  bool wants_baseline = false;
  bool pending = false;
  bool wants_alone = false;
  bool by_progress = false;
  uint32_t sequence = 0;
  bool known() const { return speed_permille > 0; }
};
uint32_t PackKernelSignal(const KernelSignal& s);
KernelSignal UnpackKernelSignal(uint32_t word);

class KernelClock {
 public:
  // One sampled kernel: its key, its GPU time, whether opportunistic work had work queued
  // while it ran (else it was alone), and whether its stream had run dry before it (a sample
  // that does not measure its kernel is left out and counted: MeasuresTheKernel).
  void Add(uint64_t key, int64_t gpu_ns, bool beside_opportunistic, bool stream_dry = false);
  // Ends a period of period_ns (0: not timed; counted at most kMaxCountedPeriodNs)
  // in which the job made `launches` launches (0: not counted) and its host waited waited_ns on the GPU (-1: not known, or a launch found the
  // queue full; no cap): its reading, numbered `sequence` (over the periods carried into it),
  // and starts the next. kernels_read: whether the kernels give the period's reading (false
  // where the job's launches or waits do, PeriodSpeed): only then do kernels that read faster
  // than their baselines ask for new ones, as those baselines move no other reading.
  KernelSignal ClosePeriod(uint32_t sequence, uint64_t launches = 0, int64_t period_ns = 0, int64_t waited_ns = -1,
                           bool kernels_read = true);
  // The kernel's baseline, ns (0: none).
  double Baseline(uint64_t key) const;
  int kernels() const { return used_; }
  // Why the newest period's signal wants a baseline, in words for the trace ("" where it does not).
  const char* wanted_because() const { return wanted_because_; }
  // The samples the newest period left out, timed on a dry stream (for the trace).
  int dry_left_out() const { return dry_left_out_; }
  // The newest period's samples alone that took over kSlowAloneFactor times their kernel's
  // baseline (one with kBaselineSamples samples already; for the trace).
  int slow_alone() const { return slow_alone_; }

 private:
  struct Entry {
    uint64_t key = 0;  // 0: free
    double base_ns = 0;                   // the median of recent (kBaselineSamples), kept
    float recent[kBaselineSamples] = {};  // the newest samples alone, ns, oldest overwritten first
    int samples = 0;                      // samples alone in all
  };
  static double MedianOfRecent(const Entry& e);
  const Entry* Slot(uint64_t key) const;
  Entry* Find(uint64_t key, bool insert);
  Entry table_[kKernelTableSize];
  int used_ = 0;
  bool faster_ = false;  // the newest reading's kernels ran faster than their baselines (kFasterThanAlone)
  // Samples alone taken so far, all kernels together (kMinBaselineSamples), and their count
  // when the current stretch of faster readings first asked for a baseline (-1: no such
  // stretch).
  int64_t alone_samples_ = 0;
  int64_t faster_asked_at_ = -1;
  const char* wanted_because_ = "";
  // Time the job ran (timed periods with launches or samples beside opportunistic work, each
  // at most kMaxCountedPeriodNs) since its newest baseline sample.
  int64_t ran_since_alone_ns_ = 0;
  void StartWindow();
  // The reading's window so far (this period and those carried into it): beside-opportunistic
  // samples with a baseline (their baselines' and times' sums), every sample's time, alone or
  // beside (the mean kernel's time), and the periods' launches, time and waits.
  double base_sum_ = 0, time_sum_ = 0;
  int judged_ = 0;
  double all_sum_ = 0;
  int all_ = 0;
  uint64_t launches_ = 0;  // the periods' launches (used only where counted_)
  int64_t span_ns_ = 0;    // the periods' length (used only where counted_)
  int64_t waited_ns_ = 0;  // -1 once a period's waits were not known
  int carried_ = 0;        // periods carried into this one
  bool counted_ = true;    // every period in the window had its launches and length
  // This period's beside-opportunistic samples, all and with a baseline (wants_baseline), and
  // its samples left out (dry_left_out: the newest closed period's).
  int period_beside_ = 0, period_judged_ = 0;
  int period_dry_ = 0, dry_left_out_ = 0;
  int period_slow_alone_ = 0, slow_alone_ = 0;
};

}  // namespace gslice::compute
