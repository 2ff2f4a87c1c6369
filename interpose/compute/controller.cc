#include "controller.h"

#include <stdarg.h>
#include <stdio.h>

namespace gslice::compute {

void AddPeriod(GuaranteedPeriod* sum, const GuaranteedPeriod& p) {
  sum->launches += p.launches;
  sum->busy_ns += p.busy_ns;
  sum->overlap_ns += p.overlap_ns;
}

GuaranteedPeriod PeriodTotal(const GuaranteedPeriod* jobs, int n) {
  GuaranteedPeriod t;
  for (int i = 0; i < n; ++i) AddPeriod(&t, jobs[i]);
  return t;
}

double OverlapBound(const GuaranteedPeriod& total, int opportunistic_peers) {
  const double lost = static_cast<double>(total.overlap_ns) * (1 + opportunistic_peers) / static_cast<double>(total.busy_ns);
  return lost >= 1 ? 0 : 1 - lost;
}

double OverlapSpeed(const GuaranteedPeriod* jobs, int n, int opportunistic_peers) {
  const GuaranteedPeriod t = PeriodTotal(jobs, n);
  return t.busy_ns < kMinJudgedBusyNs ? -1 : OverlapBound(t, opportunistic_peers);
}

double StrictestFloor(const ControlPeriod& period) {
  uint32_t floor = 0;
  for (int i = 0; i < period.count; ++i) {
    const PeerPeriod& p = period.peers[i];
    if (p.floor_permille > floor) floor = p.floor_permille;
  }
  return (floor == 0 ? kProtectDefaultPermille : floor) / 1000.0;
}

void AddTrace(ControlDecision* d, const char* fmt, ...) {
  for (char* line : d->trace) {
    if (line[0] != '\0') continue;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof d->trace[0], fmt, ap);
    va_end(ap);
    return;
  }
}

}  // namespace gslice::compute
