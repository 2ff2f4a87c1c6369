// The clocks every layer reads, in one place.
//
// Header-only and inline on purpose: the shim reads the monotonic clock on its launch and
// trace paths, where a call into another library would cost more than the read itself.
// clock_gettime is served by the vDSO (no system call) and needs nothing beyond libc, so
// including this adds no dependency to any binary.
#pragma once

#include <time.h>

#include <cstdint>

namespace gslice {

// CLOCK_MONOTONIC in nanoseconds: for intervals, deadlines and ages. One host's processes
// share it (the ledger's claimed_ns, the suspend board's heartbeats compare across them);
// it means nothing on another host or after a reboot.
inline int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CLOCK_MONOTONIC at the kernel tick's resolution (1-4 ms), behind MonotonicNs by at most a
// tick, for a few ns where a hot path stores a deadline much longer than a tick.
inline int64_t MonotonicCoarseNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// MonotonicNs in whole milliseconds, for poll(2)-style timeouts.
inline int64_t MonotonicMs() { return MonotonicNs() / 1'000'000; }

// CLOCK_REALTIME in nanoseconds since the Unix epoch: for times a person or another host
// reads (a trace's start); never for intervals, since the wall clock may step.
inline int64_t UnixNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// UnixNs in whole milliseconds, as the API and the store give times.
inline int64_t UnixMs() { return UnixNs() / 1'000'000; }

}  // namespace gslice
