#include "kernel_clock.h"

#include <algorithm>
#include <cstring>

namespace gslice::compute {
namespace {

constexpr uint32_t kSpeedMask = 0x7ffu;
constexpr uint32_t kWantsBaseline = 1u << 11;
constexpr uint32_t kPending = 1u << 12;
constexpr uint32_t kWantsAlone = 1u << 13;
constexpr uint32_t kByProgress = 1u << 14;
constexpr int kSequenceShift = 16;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

}  // namespace

uint64_t KernelKey(const KernelShape& shape) {
  uint64_t h = Mix(0x243f6a8885a308d3ULL, reinterpret_cast<uintptr_t>(shape.function));
  for (int i = 0; i < 3; ++i) h = Mix(h, (uint64_t{shape.grid[i]} << 32) | shape.block[i]);
  h = Mix(h, shape.shared_bytes);
  return h == 0 ? 1 : h;
}

uint32_t PackKernelSignal(const KernelSignal& s) {
  const uint32_t speed = s.speed_permille > kMaxSpeedPermille ? kMaxSpeedPermille : s.speed_permille;
  return speed | (s.wants_baseline ? kWantsBaseline : 0u) | (s.pending ? kPending : 0u) |
         (s.wants_alone ? kWantsAlone : 0u) |
         (s.by_progress ? kByProgress : 0u) | ((s.sequence & 0xffffu) << kSequenceShift);
}

KernelSignal UnpackKernelSignal(uint32_t word) {
  return {.speed_permille = word & kSpeedMask,
          .wants_baseline = (word & kWantsBaseline) != 0,
          .pending = (word & kPending) != 0,
          .wants_alone = (word & kWantsAlone) != 0,
          .by_progress = (word & kByProgress) != 0,
          .sequence = word >> kSequenceShift};
}

const KernelClock::Entry* KernelClock::Slot(uint64_t key) const {
  // Open addressing, linear probing; entries are never removed, so a free slot ends a search:
  // the key's entry, or the free slot where it would go (nullptr: the table is full).
  for (int i = 0; i < kKernelTableSize; ++i) {
    const Entry& e = table_[(key + static_cast<uint64_t>(i)) % kKernelTableSize];
    if (e.key == key || e.key == 0) return &e;
  }
  return nullptr;
}

KernelClock::Entry* KernelClock::Find(uint64_t key, bool insert) {
  Entry* e = const_cast<Entry*>(Slot(key));
  if (e == nullptr || e->key == key) return e;
  // A full table keeps its kernels: a new one gets no baseline (its samples are left out).
  if (!insert || used_ >= kKernelTableSize * 3 / 4) return nullptr;
  e->key = key;
  ++used_;
  return e;
}

double KernelClock::MedianOfRecent(const Entry& e) {
  const int n = std::min(e.samples, kBaselineSamples);
  float v[kBaselineSamples];
  for (int i = 0; i < n; ++i) {  // insertion sort: at most five
    int j = i;
    for (; j > 0 && v[j - 1] > e.recent[i]; --j) v[j] = v[j - 1];
    v[j] = e.recent[i];
  }
  return v[(n - 1) / 2];  // the lower middle one where n is even
}

void KernelClock::Add(uint64_t key, int64_t gpu_ns, bool beside_opportunistic, bool stream_dry) {
  if (!MeasuresTheKernel(stream_dry, gpu_ns)) {
    ++period_dry_;
    return;
  }
  if (gpu_ns <= 0 || key == 0) return;
  const double t = static_cast<double>(gpu_ns);
  all_sum_ += t;
  ++all_;
  if (!beside_opportunistic) {
    Entry* e = Find(key, /*insert=*/true);
    if (e == nullptr) return;
    if (e->samples >= kBaselineSamples && t > kSlowAloneFactor * e->base_ns) ++period_slow_alone_;
    e->recent[e->samples % kBaselineSamples] = static_cast<float>(t);
    ++e->samples;
    e->base_ns = MedianOfRecent(*e);
    ++alone_samples_;
    ran_since_alone_ns_ = 0;
    return;
  }
  ++period_beside_;
  const Entry* e = Find(key, /*insert=*/false);
  if (e == nullptr || e->samples == 0) return;
  base_sum_ += e->base_ns;
  time_sum_ += t;
  ++judged_;
  ++period_judged_;
}

void KernelClock::StartWindow() {
  base_sum_ = time_sum_ = all_sum_ = 0;
  judged_ = all_ = 0;
  launches_ = 0;
  span_ns_ = waited_ns_ = 0;
  carried_ = 0;
  counted_ = true;
}

KernelSignal KernelClock::ClosePeriod(uint32_t sequence, uint64_t launches, int64_t period_ns, int64_t waited_ns,
                                      bool kernels_read) {
  KernelSignal s{.sequence = sequence};
  period_ns = std::min(period_ns, kMaxCountedPeriodNs);
  if (period_ns > 0 && (launches > 0 || period_beside_ > 0)) ran_since_alone_ns_ += period_ns;
  counted_ = counted_ && launches > 0 && period_ns > 0;
  launches_ += launches;
  span_ns_ += period_ns;
  waited_ns_ = waited_ns < 0 || waited_ns_ < 0 ? -1 : waited_ns_ + waited_ns;
  if (judged_ >= kMinSignalSamples && time_sum_ > 0) {
    const double r = base_sum_ / time_sum_;
    faster_ = r > kFasterThanAlone;
    if (r <= 1) faster_asked_at_ = -1;  // the stretch of faster readings is over
    double speed = r;
    if (counted_ && all_ > 0) {
      // b over the job's time alone, not over the period (kernel_clock.h).
      const double span = static_cast<double>(span_ns_);
      double gpu = static_cast<double>(launches_) * (all_sum_ / all_);
      if (gpu > span) gpu = span;
      const double busy = gpu * r / (span - gpu + gpu * r);
      double loss = busy * (1 / r - 1);  // under 0: a gain, where the kernels read faster
      const double waited = static_cast<double>(waited_ns_) / span;
      if (waited_ns_ >= 0) loss = std::clamp(loss, -waited, waited);
      speed = 1 / (1 + loss);
    }
    const double permille = speed * 1000 + 0.5;
    s.speed_permille = SpeedReading(permille);
    StartWindow();
  } else if (judged_ == 0 || ++carried_ >= kMaxCarriedPeriods) {
    StartWindow();  // nothing to carry, or samples too old to read together
  } else {
    s.pending = true;
  }
  // A baseline is wanted where the period's kernels beside opportunistic work mostly had none,
  // where the job's baselines rest on fewer than kMinBaselineSamples samples alone in all, where
  // the newest is stale (the job ran kBaselineRefreshNs since) while opportunistic work runs, or
  // where the newest reading's kernels ran faster than their baselines. Not where each kernel's
  // rests on one sample alone: a job of some 150 kernels (ResNet-50 training on an H200) then
  // asked in 45 of 97 periods, and its opportunistic peer paused every 4 s.
  const bool few = period_beside_ >= kMinSignalSamples && period_judged_ * 2 < period_beside_;
  const bool founded = alone_samples_ >= kMinBaselineSamples;
  const bool stale = period_beside_ > 0 && (!founded || ran_since_alone_ns_ > kBaselineRefreshNs);
  bool faster = false;
  if (faster_ && period_beside_ > 0) {
    if (faster_asked_at_ < 0) faster_asked_at_ = alone_samples_;
    faster = alone_samples_ - faster_asked_at_ < kMinSignalSamples;  // asked once (kFasterThanAlone)
  }
  faster = faster && kernels_read;  // (asked or not, the stretch of faster readings is counted)
  s.wants_baseline = few || stale || faster;
  wanted_because_ = few        ? "few kernels have one"
                    : !founded ? "too few samples alone"
                    : stale    ? "stale"
                    : faster   ? "kernels faster than alone"
                               : "";
  period_beside_ = period_judged_ = 0;
  dry_left_out_ = period_dry_;
  period_dry_ = 0;
  slow_alone_ = period_slow_alone_;
  period_slow_alone_ = 0;
  return s;
}

double KernelClock::Baseline(uint64_t key) const {
  const Entry* e = Slot(key);
  return e != nullptr && e->key == key ? e->base_ns : 0;
}

}  // namespace gslice::compute
