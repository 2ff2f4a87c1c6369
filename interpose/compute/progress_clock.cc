#include "progress_clock.h"

namespace gslice::compute {

bool ProgressClock::Stretch::Moving(double share) const {
  return ns >= kMinStretchNs && passes > 0 && moved >= share * passes;
}

bool ProgressClock::Stretch::Busy(double share) const {
  const double busy = static_cast<double>(moved_ns + waited), span = static_cast<double>(ns);
  return ns >= kMinStretchNs && waits_known && busy >= share * span && busy <= kOneHostShare * span;
}

void ProgressClock::Pass(int64_t now_ns, uint64_t launches, bool queued, int64_t waited_ns) {
  if (queued) queued_ns_ = now_ns;
  const bool beside = queued_ns_ >= 0 && now_ns - queued_ns_ < kAloneSettleNs;
  const int64_t dt = now_ns - last_ns_;
  const uint64_t added = launches - last_launches_;
  const bool split = started_ && dt > 0 && dt <= kMaxPassGapNs && launches >= last_launches_;
  const bool waits_known = waited_ns >= 0 && last_waited_ >= 0 && waited_ns >= last_waited_;
  const int64_t waited = waits_known ? waited_ns - last_waited_ : 0;
  started_ = true;
  last_ns_ = now_ns;
  last_launches_ = launches;
  last_waited_ = waited_ns;
  if (!split) return;
  if (added == 0) {
    Stretch& idle = beside ? idle_beside_ : idle_alone_;
    idle.ns += dt;
    ++idle.passes;
    idle.waited += waited;
    idle.waits_known = idle.waits_known && waits_known;
    return;
  }
  ran_since_alone_ns_ += dt;
  const auto add = [](Stretch& to, const Stretch& from) {
    to.ns += from.ns;
    to.launches += from.launches;
    to.passes += from.passes;
    to.moved += from.moved;
    to.moved_ns += from.moved_ns;
    to.waited += from.waited;
    to.waits_known = to.waits_known && from.waits_known;
  };
  // The passes since the last launch: the job's work if it came back within kRestNs.
  if (idle_alone_.ns + idle_beside_.ns <= kRestNs) {
    add(alone_, idle_alone_);
    add(period_alone_, idle_alone_);
    add(beside_, idle_beside_);
  }
  idle_alone_ = idle_beside_ = {};
  const Stretch pass = {
      .ns = dt, .launches = added, .passes = 1, .moved = 1, .moved_ns = dt, .waited = waited, .waits_known = waits_known};
  add(beside ? beside_ : alone_, pass);
  if (!beside) add(period_alone_, pass);
}

uint32_t ProgressClock::ClosePeriod() {
  const auto share = [](int moved, int passes) { return passes > 0 ? moved * 1000 / passes : 0; };
  seen_ = {.alone_ms = period_alone_.ns / 1'000'000, .beside_ms = beside_.ns / 1'000'000,
           .alone_moved_permille = share(period_alone_.moved, period_alone_.passes),
           .beside_moved_permille = share(beside_.moved, beside_.passes)};
  period_alone_ = {};
  const auto mix = [](double old, double sample) { return old <= 0 ? sample : old + kProgressWeight * (sample - old); };
  // The share of a stretch's time its host did not wait on the GPU.
  const auto free = [](const Stretch& st) {
    const double w = static_cast<double>(st.waited) / static_cast<double>(st.ns);
    return w < 1 ? 1 - w : 0;
  };
  if (alone_.ns >= kMinStretchNs) {
    const bool moving = alone_.Moving(kSaturatedShare);
    const bool busy = alone_.Busy(kSaturatedShare) && alone_.Moving(kHostBoundShare);
    alone_busy_rate_ = busy ? mix(alone_busy_rate_, alone_.Rate()) : 0;
    if (moving) {
      alone_rate_ = mix(alone_rate_, alone_.Rate());
    } else {
      alone_rate_ = 0;  // not launching without pause alone: its launches are not its speed
      ratio_ = 0;
    }
    // Not busy alone: its host idles (a server between requests), or waits on the GPU most of
    // its time (a job bound by the GPU), and its waits say little of its speed.
    const double free_alone = free(alone_);
    alone_free_ = busy && free_alone > 0 ? mix(alone_free_, free_alone) : 0;
    ran_since_alone_ns_ = 0;
    alone_ = {};
  }
  uint32_t reading = 0;
  waits_reading_ = 0;
  wants_alone_ = false;
  if (beside_.ns >= kMinStretchNs) {
    loop_ = beside_.Moving(kSaturatedShare) || (beside_.Busy(kSaturatedShare) && beside_.Moving(kHostBoundShare));
    const bool recent = ran_since_alone_ns_ <= kAloneRateFreshNs;  // the references alone
    const bool fresh = alone_rate_ > 0 && recent;
    seen_.fresh = fresh;
    // With references, to renew them; with none, where it launches in most passes beside (a
    // loop whose launches may be its speed), to take its first.
    const bool references = alone_rate_ > 0 || alone_free_ > 0;
    wants_alone_ = (references || beside_.Moving(kHostBoundShare)) && ran_since_alone_ns_ >= kAloneRenewNs;
    const double free_beside = free(beside_);
    const bool busy = beside_.Busy(kSaturatedShare);
    if (alone_free_ > 0 && recent && busy && free_beside > 0) {
      waits_reading_ = SpeedReading(free_beside / alone_free_ * 1000.0 + 0.5);
    }
    if (alone_busy_rate_ > 0 && recent && busy) {
      seen_.launch_rate_permille = SpeedReading(beside_.Rate() / alone_busy_rate_ * 1000.0 + 0.5);
    }
    if (beside_.Moving(kSaturatedShare) && fresh) {
      ratio_ = mix(ratio_, beside_.Rate() / alone_rate_);
      const double permille = ratio_ * 1000.0;
      reading = SpeedReading(permille);
    } else {
      ratio_ = 0;
    }
  }
  beside_ = {};
  return reading;
}

}  // namespace gslice::compute
