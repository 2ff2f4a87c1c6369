// Compute policy of one process (cap, share, class) and the pure rules the launch gate
// applies per launch: the cap (GCRA), share turns, the queued-ahead bound. No driver calls, no
// clocks of their own, so the rules are unit-testable. The opportunistic rate controllers are
// controller.h, time_sliced_controller.h and mps_controller.h. docs/compute.md explains the
// design and its error bounds.
#pragma once

#include <atomic>
#include <cstdint>

namespace gslice::compute {

enum class ComputeClass : uint32_t { kGuaranteed = 0, kOpportunistic = 1 };  // == SliceClass

struct ComputePolicy {
  uint32_t cap_permille = 1000;    // hard cap; 1000 = none
  uint32_t share_permille = 1000;  // weight under contention within the class
  bool share_set = false;          // GSLICE_SHARE given explicitly
  ComputeClass cls = ComputeClass::kGuaranteed;
  bool capped() const { return cap_permille < 1000; }
};

// Parses GSLICE_COMPUTE, GSLICE_SHARE and GSLICE_CLASS values ("" = default). On bad input
// returns false with a message naming the variable in error[0..size); *out is unchanged.
bool ParseComputePolicy(const char* cap, const char* share, const char* cls, ComputePolicy* out,
                        char* error, int size);

// A slice's compute policy on one GPU as its writer (gsliced, `gslice set`) holds it in the
// node ledger now: the two policy words decoded (LedgerComputePolicy: -1 where a word is not
// set, else permille, a cap of 0 meaning none and a share of 0 none given) and the slice's
// class (LedgerSlice::slice_class; -1: the process is in no slice the gate follows).
struct SlicePolicy {
  int cap_permille = -1;
  int share_permille = -1;
  int slice_class = -1;  // ComputeClass
};

// The policy a gate applies on a GPU: the one its process started with (env: GSLICE_COMPUTE,
// GSLICE_SHARE, GSLICE_CLASS) under what the slice's writer set in the ledger. A set word wins
// over the environment: a cap of 0 (or 1000 and above) lifts the cap, a share of 0 leaves the
// default weight, given by no one. The class: a slice whose class changed since the gate first
// saw it (start_class) gives its processes the new one; otherwise an opportunistic slice makes
// its processes opportunistic (none promotes itself above its slice), a guaranteed one leaves
// the environment's. Pure: the gate thread calls it every pass with what it loaded.
ComputePolicy EffectivePolicy(const ComputePolicy& env, const SlicePolicy& slice, int start_class);

// A policy as one word, so that launching threads read it whole while the gate thread
// changes it (16 bits each for cap and share permille, then the flag and the class).
inline constexpr uint64_t PackPolicy(const ComputePolicy& p) {
  return static_cast<uint64_t>(p.cap_permille & 0xffffu) | (static_cast<uint64_t>(p.share_permille & 0xffffu) << 16) |
         (p.share_set ? 1ull << 32 : 0ull) | (static_cast<uint64_t>(p.cls) << 33);
}
inline constexpr ComputePolicy UnpackPolicy(uint64_t w) {
  return {.cap_permille = static_cast<uint32_t>(w & 0xffffu),
          .share_permille = static_cast<uint32_t>((w >> 16) & 0xffffu),
          .share_set = ((w >> 32) & 1u) != 0,
          .cls = static_cast<ComputeClass>((w >> 33) & 1u)};
}

// Tunables (ns). Chosen for the bounds in docs/compute.md.
inline constexpr int64_t kCapToleranceNs = 10'000'000;    // GCRA burst: 10 ms of wall time
inline constexpr int64_t kShareQuantumNs = 40'000'000;    // turn length, in virtual time
inline constexpr int64_t kActiveHoldNs = 1'000'000;       // "wants the GPU" after a launch attempt
inline constexpr int64_t kInflightHoldNs = 2'000'000;     // "has queued work" unless refreshed
inline constexpr int64_t kCapDepthNs = 2'000'000;         // queued-ahead work of capped slices
inline constexpr int64_t kOpportunisticDepthNs = 200'000; // ... of opportunistic slices near guaranteed work
inline constexpr int64_t kOpportunisticMarkerNs = 100'000; // their eager markers' spacing (no cap)
inline constexpr int64_t kOpportunisticDeepAfterNs = 50'000'000; // ... queue deeper once guaranteed work idled this long
inline constexpr int64_t kDrainWaitMaxNs = 5'000'000;     // longest wait for a peer to drain

// GCRA (the generic cell rate algorithm) on GPU time: a token bucket held as one number,
// the theoretical arrival time. Each measured busy interval b pushes it by b / rate; work
// may start while tat <= now + tolerance. Over any window W the slice gets at most
// rate * (W + tolerance) of GPU time, plus what was already queued (the depth bound).
// Lock-free: one CAS per charge; a process that dies leaves only a time in the past.
inline int64_t GcraCharge(std::atomic<int64_t>& tat, int64_t now, int64_t busy_ns, uint32_t rate_permille) {
  const int64_t inc = busy_ns * 1000 / (rate_permille == 0 ? 1 : rate_permille);
  int64_t cur = tat.load(std::memory_order_relaxed);
  int64_t next;
  do {
    // Time the slice did not use is not banked beyond the tolerance.
    next = (cur < now - kCapToleranceNs ? now - kCapToleranceNs : cur) + inc;
  } while (!tat.compare_exchange_weak(cur, next, std::memory_order_relaxed));
  return next;
}
// How long a launch must wait before the cap lets it start (0: now).
inline int64_t GcraWaitNs(int64_t tat, int64_t now) {
  const int64_t w = tat - kCapToleranceNs - now;
  return w > 0 ? w : 0;
}

// Virtual time of a share: measured busy / weight. The slice with the lowest virtual time
// among the contending ones of its class runs; the runner keeps its turn until it leads the
// next by kShareQuantumNs. Shares therefore hold in ratio; idle slices do not contend.
inline int64_t VtimeIncrement(int64_t busy_ns, uint32_t share_permille) {
  return busy_ns * 1000 / (share_permille == 0 ? 1 : share_permille);
}
// True when a slice with virtual time mine may launch now, given the lowest virtual time
// among the other contending slices of its class (min_other, INT64_MAX when none) and
// whether one of them holds the turn. The turn is exclusive: the runner keeps it until it
// leads by kShareQuantumNs; then the slice furthest behind takes it.
inline bool ShareTurn(int64_t mine, int64_t min_other, bool running, bool peer_running) {
  if (running) return mine <= min_other || mine - min_other <= kShareQuantumNs;
  return mine <= min_other && !peer_running;
}
// A slice that starts contending again catches up: it does not bank idle time.
inline int64_t VtimeOnActivation(int64_t mine, int64_t min_other) {
  return (min_other != INT64_MAX && mine < min_other) ? min_other : mine;
}

// Queued-ahead bound: launches may go on while the estimated queued work
// (outstanding launches x mean launch cost) stays under depth_ns. At least one launch is
// always allowed, so a kernel longer than the bound still runs.
inline bool DepthAllows(uint64_t outstanding, int64_t mean_launch_ns, int64_t depth_ns) {
  if (outstanding == 0) return true;
  return static_cast<int64_t>(outstanding) * (mean_launch_ns > 0 ? mean_launch_ns : 1) < depth_ns;
}

}  // namespace gslice::compute
