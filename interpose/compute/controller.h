// What the opportunistic rate controllers share: one control period's measurements of the
// guaranteed peers on a GPU (ControlPeriod), the decision a controller returns
// (ControlDecision), and how a period's speed is judged. The controllers themselves are
// time_sliced_controller.h (a GPU that time-slices processes) and mps_controller.h (a GPU
// shared through MPS). Pure: no clock, atomic, ledger or driver; the launch gate samples the
// ledger, builds a ControlPeriod every kControlPeriodNs, calls its controller and applies the
// decision. docs/compute.md explains the design.
#pragma once

#include <cstdint>

#include "gslice/ledger.h"

namespace gslice::compute {

inline constexpr int64_t kControlPeriodNs = 250'000'000;  // one decision per 250 ms
// Guaranteed peers on one GPU a controller follows (the gate follows as many peers).
inline constexpr int kMaxControlledPeers = 48;

// One guaranteed peer's control period.
struct PeerPeriod {
  // Who: its compute entry and the entry's state word. A record a controller keeps for the
  // peer is valid while both match (another process in the entry is a new peer).
  int id = -1;
  uint64_t owner = 0;
  uint64_t launches = 0;    // launches issued in the period
  int64_t busy_ns = 0;      // time it had work queued in the period
  int64_t overlap_ns = 0;   // ... of which this opportunistic process had work queued too
  // Its floor, the share of its solo speed it is kept at: its slice's protection level
  // (gslice/ledger.h, LedgerSlice::protect_permille).
  uint32_t floor_permille = kProtectDefaultPermille;
  // Its kernels' speed beside opportunistic work as it last published it (a packed
  // KernelSignal, kernel_clock.h; 0: none): what the MPS controller judges.
  uint32_t kernel_signal = 0;
};

// One control period on one GPU, as the gate measured it.
struct ControlPeriod {
  bool guaranteed_busy = false;  // some guaranteed peer had work queued or wanted the GPU
  int opportunistic_peers = 0;   // other opportunistic processes on the GPU
  bool opportunistic_busy = false;  // ... one of which had work queued in the period
  bool wanted = false;           // this process wanted the GPU (launched, or waited to)
  int count = 0;                 // peers[0, count): the guaranteed peers sampled
  PeerPeriod peers[kMaxControlledPeers];
};

// What opportunistic work may do until the next decision. Two knobs, used one at a time:
//  - rate_permille: the share of GPU time it may use while guaranteed work is busy
//    (1000: no limit);
//  - gap_ns (only while the rate is 0): how long guaranteed work must have been idle before
//    opportunistic work enters its gap. On a GPU that time-slices processes, work queued in
//    a short gap delays the guaranteed job's next kernels, so even rate 0 can cost it speed;
//    staying out of gaps shorter than gap_ns bounds that.
struct ControlDecision {
  uint32_t rate_permille = 0;
  int64_t gap_ns = 0;
  // The controller measures the guaranteed jobs alone: opportunistic work stays out entirely
  // (also out of their gaps shorter than kProbeGapNs).
  bool probe_pause = false;
  // Guaranteed work is idle: GPU time used meanwhile is not held against the rate later.
  bool forget_budget = false;
  // What the controller decided, for the gate's trace: up to two lines ("" for none).
  char trace[2][320] = {};
};
// During a probe opportunistic work stays out of the guaranteed jobs' gaps this short too, so
// that what is measured is their speed alone.
inline constexpr int64_t kProbeGapNs = 20'000'000;

// ---- a period's overlap ----------------------------------------------------------------
//
// On a GPU that time-slices processes a guaranteed job loses time to opportunistic work only
// while both have work queued: its kernels cannot take the GPU from a job that has none.
struct GuaranteedPeriod {
  uint64_t launches = 0;     // launches issued in the period
  int64_t busy_ns = 0;       // time with work queued in the period
  int64_t overlap_ns = 0;    // ... of which this opportunistic process had work queued too
};
inline constexpr int64_t kMinJudgedBusyNs = 20'000'000;  // less busy time says nothing of speed

// Adds p's launches, busy and overlap time to *sum.
void AddPeriod(GuaranteedPeriod* sum, const GuaranteedPeriod& p);
// The jobs' periods summed.
GuaranteedPeriod PeriodTotal(const GuaranteedPeriod* jobs, int n);
// 1 - overlap / busy of a total (busy > 0), each other opportunistic process counted as
// overlapping as much.
double OverlapBound(const GuaranteedPeriod& total, int opportunistic_peers);
// So 1 - overlap / busy bounds their speed from below whatever their own speed does; no
// baseline is needed. Each opportunistic process sees only its own overlap; the others
// (opportunistic_peers) are assumed to overlap as much. -1 when the jobs were busy for less
// than kMinJudgedBusyNs in all.
double OverlapSpeed(const GuaranteedPeriod* jobs, int n, int opportunistic_peers);

// The strictest (highest) floor among the period's peers, as a fraction of solo speed;
// kProtectDefaultPermille with none. Idle peers count too: the decision holds for the next
// period, in which they may be busy.
double StrictestFloor(const ControlPeriod& period);

// Appends one line to the decision's trace (dropped when both lines are taken).
void AddTrace(ControlDecision* d, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace gslice::compute
