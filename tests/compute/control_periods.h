// Synthetic control periods for the opportunistic rate controllers' tests (controller_test.cc,
// mps_controller_test.cc): a guaranteed peer's period and a busy or idle period around it, on
// simulated time.
#ifndef GSLICE_TESTS_COMPUTE_CONTROL_PERIODS_H_
#define GSLICE_TESTS_COMPUTE_CONTROL_PERIODS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "controller.h"

namespace gslice::compute {

inline constexpr int64_t kBusyNs = 200'000'000;  // a busy guaranteed job's busy time per period

// One guaranteed peer's period: busy for busy_ns, at speed (of its solo speed, launches per
// busy ns kPerNs alone), with this process's work queued beside it for overlap of its busy time.
inline constexpr double kPerNs = 1e-4;
inline PeerPeriod Peer(double speed, double overlap, uint32_t floor_permille = kProtectDefaultPermille, int id = 7,
                       int64_t busy_ns = kBusyNs) {
  return {.id = id,
          .owner = 1000u + static_cast<uint64_t>(id),
          .launches = static_cast<uint64_t>(std::llround(speed * kPerNs * static_cast<double>(busy_ns))),
          .busy_ns = busy_ns,
          .overlap_ns = static_cast<int64_t>(overlap * static_cast<double>(busy_ns)),
          .floor_permille = floor_permille};
}
inline ControlPeriod Busy(std::vector<PeerPeriod> peers, int opportunistic_peers = 0) {
  ControlPeriod p;
  p.guaranteed_busy = true;
  p.opportunistic_peers = opportunistic_peers;
  p.wanted = true;
  for (const PeerPeriod& x : peers) p.peers[p.count++] = x;
  return p;
}
inline ControlPeriod Idle() { return ControlPeriod{}; }
inline std::string Trace(const ControlDecision& d) { return std::string(d.trace[0]) + "\n" + d.trace[1]; }

}  // namespace gslice::compute

#endif  // GSLICE_TESTS_COMPUTE_CONTROL_PERIODS_H_
