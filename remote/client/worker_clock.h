// The worker's clock against the client's, for the client's timeline (client_trace.h): a
// measurement over the worker's connection (wire.h: kOpTraceClock; eight exchanges, the one
// with the shortest round trip wins, NTP-style), and the line through two of them (the
// attach's and the exit's) that puts the worker's times on the client's clock, drift taken out.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gslice::remote {

// One measurement of the worker's clock against the client's: client time = worker time +
// offset, +- uncertainty, at worker time `at`.
struct ClockPoint {
  bool valid = false;
  int64_t offset = 0;
  int64_t uncertainty = 0;
  int64_t at = 0;
};

// The worker's clock against the client's, read with now (the client's timeline clock): the
// exchange with the shortest round trip. False when the worker does not answer them; *failed
// (when not null) gets the connection's failure.
bool MeasureClock(int64_t (*now)(), ClockPoint* point, CUresult* failed = nullptr);

// The line through the attach's and the exit's measurements: worker time -> client time.
struct ClockLine {
  int64_t offset = 0;       // at reference
  int64_t uncertainty = 0;  // the larger of the two
  int64_t reference = 0;    // worker time
  double drift_ppb = 0;     // how fast the offset grows per ns of the worker's clock, in 1e-9:
                            // positive when the worker's clock runs slow
  int64_t Convert(int64_t t) const {
    return t + offset + static_cast<int64_t>(static_cast<double>(t - reference) * drift_ppb / 1e9);
  }
};

ClockLine LineThrough(const ClockPoint& first, const ClockPoint& last);

}  // namespace gslice::remote
