#include "worker_clock.h"

#include <algorithm>
#include <vector>

#include "transport.h"
#include "wire.h"

namespace gslice::remote {

namespace {

// How many clock exchanges a measurement makes; the shortest round trip wins.
constexpr int kClockPings = 8;

}  // namespace

bool MeasureClock(int64_t (*now)(), ClockPoint* point, CUresult* failed) {
  int64_t* offset = &point->offset;
  int64_t* uncertainty = &point->uncertainty;
  int64_t best_rtt = -1;
  for (int k = 0; k < kClockPings; ++k) {
    std::vector<uint8_t> reply;
    const int64_t sent = now();
    if (const CUresult r = TraceExchange(kOpTraceClock, &reply); r != CUDA_SUCCESS) {
      if (failed != nullptr) *failed = r;
      point->valid = best_rtt >= 0;
      return point->valid;
    }
    const int64_t back = now();
    Reader r(reply.data(), reply.size());
    int32_t status = 0;
    int64_t worker = 0;
    if (!r.Get(&status) || status != CUDA_SUCCESS || !r.Get(&worker) || !r.AtEnd()) {
      point->valid = best_rtt >= 0;
      return point->valid;
    }
    const int64_t rtt = back - sent;
    if (best_rtt < 0 || rtt < best_rtt) {
      best_rtt = rtt;
      *offset = sent + rtt / 2 - worker;  // client time = worker time + offset
      *uncertainty = (rtt + 1) / 2;
      point->at = worker;
    }
  }
  point->valid = best_rtt >= 0;
  return point->valid;
}

ClockLine LineThrough(const ClockPoint& first, const ClockPoint& last) {
  if (!first.valid || last.at <= first.at) {
    return ClockLine{.offset = last.offset, .uncertainty = last.uncertainty, .reference = last.at, .drift_ppb = 0};
  }
  return ClockLine{.offset = first.offset, .uncertainty = std::max(first.uncertainty, last.uncertainty),
                   .reference = first.at,
                   .drift_ppb = static_cast<double>(last.offset - first.offset) * 1e9 /
                                static_cast<double>(last.at - first.at)};
}

}  // namespace gslice::remote
