// The launch gate's state, shared by its two halves: the launch path (launch_gate.cc:
// BeforeLaunch, AfterLaunch and what they call) and the gate thread (gate_thread.cc:
// initialisation, registering GPUs, the peer scan, following the slice's policy, polling the
// meters, the opportunistic control loop, the exit handshake). Internal to the gate: the rest
// of the shim uses launch_gate.h. The decisions are pure units of their own (policy.h,
// peers.h, share_turn.h, the controllers); what is here is what they are sampled from and
// applied to.
//
// Concurrency:
//  - Gate is set up by InitLaunchGate before the gate thread starts. Devices are appended
//    under devices_mu and published by device_count (release); a Device is never removed
//    (ForgetContext only unbinds its context).
//  - A Device's policy, peers and control are written by the gate thread only (and by
//    AddDevice before the device is published); launching threads load them whole, relaxed.
//  - turn: launching threads of the GPU, under turn_mu (DepthBounded reads running() without).
//  - opp: the controller's decision is written by the gate thread, near and tat by both.
//  - meter: its stream table under streams_mu (appended, never shrunk), polls under poll_mu.
//  - Once a GPU and a stream are known, the launch path takes no lock other than these and
//    makes no system call beyond the driver's own calls and its sleeps; a context's first
//    launch registers the GPU (AddDevice), a stream's first launch allocates its meter.
#pragma once

#include <cuda.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "controller.h"
#include "gpu_meter.h"
#include "gslice/clock.h"
#include "gslice/ledger.h"
#include "kernel_clock.h"
#include "launch_gate.h"
#include "mps_controller.h"
#include "peers.h"
#include "policy.h"
#include "progress_clock.h"
#include "share_turn.h"
#include "time_sliced_controller.h"

namespace gslice::compute {

inline constexpr auto kRlx = std::memory_order_relaxed;
inline constexpr int kMaxContexts = 16;  // GPUs (contexts) of one process the gate follows
inline constexpr int kMaxStreams = 256;  // metered streams per GPU; launches on more pass unmetered
// The mean launch cost (the depth bound's estimate of queued work) before any is measured.
inline constexpr int64_t kInitialMeanLaunchNs = 20'000;

inline void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// This process's GPU time on one device: its streams' meters and what they add up to.
struct DeviceMeter {
  EventPool pool;
  std::mutex streams_mu;
  // Allocated on first use (each holds a marker ring): a process pays for the streams it
  // launches on, not for the table.
  std::atomic<StreamMeter*> streams[kMaxStreams] = {};
  std::atomic<int> stream_count{0};
  std::atomic<int64_t> busy_total{0};
  std::atomic<int64_t> mean_launch_ns{kInitialMeanLaunchNs};
  std::mutex poll_mu;
  uint64_t last_done = 0;  // launches completed at the previous poll (poll_mu)
};

// The other alive entries on this GPU (ClassifyPeers' PeerList), as the gate thread's last
// peer scan published it.
struct PeerSet {
  std::atomic<int> count{0};
  std::atomic<uint32_t> words[kMaxPeers] = {};  // PackPeer
  std::atomic<int> opportunistic{0};
  std::atomic<int> guaranteed{0};
  std::atomic<bool> share_peer{false};
};

// What the opportunistic controller decided (ControlDecision), as launching threads read it:
// while guaranteed work is busy, opportunistic work may use rate_permille of the GPU's time
// (GCRA on tat), or at rate 0 enter only gaps longer than gap_ns; during a probe none.
struct OpportunisticLimits {
  std::atomic<int64_t> tat{0};
  std::atomic<uint32_t> rate_permille{0};
  std::atomic<int64_t> gap_ns{0};
  std::atomic<bool> probe_pause{false};
  // Near guaranteed work on a time-sliced GPU (DepthNs): the queue is kept short and every
  // launch is marked. Written by launching threads and the gate thread's passes.
  std::atomic<bool> near{false};
  // Until when this process's unmetered launches and waits said it has work queued
  // (SayWorkQueued): the metered queue (PollDevice) does not hold that work, so the word stands
  // until then once launches are metered again.
  std::atomic<int64_t> said_until{0};
};

// The gate thread's side of the controller: it samples the guaranteed peers every pass, and
// every kControlPeriodNs hands the period to the GPU's controller.
struct ControlLoop {
  int64_t next_ns = 0;
  int64_t last_sample_ns = 0;
  bool busy_seen = false;  // a guaranteed peer was busy in the period so far
  bool wanted_seen = false;  // this process wanted the GPU in the period so far
  bool others_seen = false;  // another opportunistic process had work queued in the period so far
  // One guaranteed peer's period so far, by its compute entry.
  struct Sample {
    int index = -1;              // -1: unused
    uint64_t owner = 0;          // the entry's state word this record belongs to
    uint64_t last_launches = 0;  // its launch count at the last period's end
    int64_t busy_ns = 0;         // time with work queued this period
    int64_t overlap_ns = 0;      // ... in which this process had work queued too
  } samples[kMaxPeers];
  TimeSlicedController time_sliced;
  MpsController mps;
};

// Kernel timing (kernel_clock.h): a guaranteed process on a GPU shared through MPS with an
// opportunistic peer brackets one launch in kKernelSampleEvery of each thread (at random
// gaps of that mean: a fixed stride aliases with a job's repeating steps), and the
// first after the gate thread saw none timed for kKernelSampleGapNs (a job of few, long
// kernels; LaunchCount::time_next), with two events, CountLaunch picking them;
// the gate thread reads the completed pairs, tells whether opportunistic work had work queued
// meanwhile, and publishes the period's reading in the process's compute entry. A sampled
// launch costs about 5 us more on an H200 under MPS (two event records and their pool); one
// in 32 added ~150 ns a launch there, one in 256 adds ~20 ns, and a launch-bound job still
// gives ~100 samples per second.
inline constexpr uint32_t kKernelSampleEvery = 256;
// While the clock wants baselines (its newest reading said so) and no opportunistic work is
// queued (the pause the controller gives for them), one launch in kKernelSampleDenseEvery of
// each thread is timed instead: one pause then times most of a job's kernels alone (ResNet-50
// training runs some 150 kernels; one in 256 of its ~10,000 launches a second timed about ten
// in a 250 ms pause), so pauses are needed only where baselines go stale, not wherever
// beside-opportunistic samples find kernels without one. Timed launches cost ~5 us each:
// ~3 ms of host time per second of such a pause, and pauses are rare.
inline constexpr uint32_t kKernelSampleDenseEvery = 16;
inline constexpr int64_t kKernelSampleGapNs = 10'000'000;
inline constexpr int kKernelSampleRing = 256;  // pairs not yet read; a full ring drops samples
// An opportunistic process on MPS that runs unthrottled publishes no measured queue: its
// launches say it has work queued for this long after each, which covers the queue a framework
// keeps ahead of the GPU, so that kernels of guaranteed work timed "alone" are.
inline constexpr int64_t kUngatedHoldNs = 50'000'000;

// CountLaunch's state (launch_gate.h): the launches of the process while it samples its
// kernels (every launch while counting, GateMode::kCount; those that reach kernel timing while
// gating), all GPUs together, for the job's busy share (kernel_clock.h) and its progress
// (progress_clock.h); and the gate thread's request that the next launch be timed. A timed
// launch goes through BeforeLaunch, which also says the process wants the GPU and has work
// queued for kUngatedHoldNs: while it launches, one is timed at least every
// kKernelSampleGapNs (and a pass), well within that hold.
// Launching threads increment launches racily, a load and a store on a line of this
// process's own (as the suspend gate's activity word is). A lost update between threads
// undercounts, which makes the job's busy share, and so its loss (kernel_clock.h), read
// smaller by the lost share; threads lose updates only when they launch at the same moment.
// The host's waits (CountWait: how many, and their time) are added from any thread
// (fetch_add: a wait is long next to it). Timed launches are counted, and those whose call
// took kBlockedLaunchNs or longer too (the host may have waited on the GPU inside its
// launches, where no wait is counted: WaitedInAFullQueue).
struct LaunchCount {
  std::atomic<uint64_t> launches{0};
  std::atomic<bool> time_next{false};
  // Every how many launches of a thread one is timed (kKernelSampleEvery, or
  // kKernelSampleDenseEvery), set by the gate thread; a thread takes a new value at its next
  // timed launch.
  std::atomic<uint32_t> every{kKernelSampleEvery};
  std::atomic<bool> count_waits{false};  // set by the gate thread once it first samples
  std::atomic<uint64_t> waits{0};
  std::atomic<int64_t> waited_ns{0};
  std::atomic<uint64_t> timed_launches{0};
  std::atomic<uint64_t> blocked_launches{0};
  // Threads inside a waiting call, counted where waits say work is queued (WaitsSayQueued:
  // set by the gate thread for an opportunistic process on MPS).
  std::atomic<bool> waits_say_queued{false};
  std::atomic<int> waiting{0};
};
extern LaunchCount g_counted;

struct KernelTiming {
  // Written by the gate thread: launching threads sample (guaranteed, MPS, an opportunistic
  // peer present).
  std::atomic<bool> sampling{false};
  // The ring: launching threads append under mu at head; the gate thread consumes from tail
  // without it (entries in [tail, head) are never written).
  std::mutex mu;
  KernelSample ring[kKernelSampleRing];
  std::atomic<uint32_t> head{0}, tail{0};
  // Gate thread only.
  uint64_t period_launches = 0;  // LaunchCount::launches at the last period's end
  uint64_t period_waits = 0;      // LaunchCount::waits at the last period's end
  int64_t period_waited_ns = 0;  // LaunchCount::waited_ns at the last period's end
  uint64_t period_timed = 0;      // LaunchCount::timed_launches at the last period's end
  uint64_t period_blocked = 0;    // LaunchCount::blocked_launches at the last period's end
  uint32_t seen_head = 0;        // the ring's head at the pass that last saw it move
  int64_t newest_sample_ns = 0;  // ... and that pass's time (kCount's time_next)
  KernelClock clock;
  ProgressClock progress;  // fed while counting (GateMode::kCount): exact launch counts
  int64_t opportunistic_busy_ns = 0;  // the newest pass that saw opportunistic work queued
  bool wants_baseline = false;        // the newest reading asked for baselines (dense timing alone)
  int64_t next_period_ns = 0;
  uint32_t sequence = 0;
};

// One context (one GPU) of this process (declared in launch_gate.h for LaunchTicket).
struct Device {
  std::atomic<CUcontext> ctx{nullptr};  // bound at the first gated launch in a context
  uint8_t uuid[16] = {};
  // The GPU is shared through MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED): processes' kernels run
  // concurrently, not in turns (mps_controller.h).
  bool spatial = false;
  // The share of the GPU's SMs this process's kernels may use, in permille (1000: all). Under
  // MPS with an active-thread percentage (how a cap is applied there), a kernel busy for t
  // holds only that share of the GPU, so GPU time is charged as t times it (Charge): the cap
  // is then held once, by the SMs, not again by the gate. Set by AddDevice (LearnSmShare).
  std::atomic<uint32_t> sm_permille{1000};
  LedgerComputeEntry* entry = nullptr;  // this process's entry in the ledger (or local)
  LedgerComputeEntry local_entry{};      // used when the ledger has no room
  DeviceMeter meter;
  std::atomic<int64_t> cap_tat{0};
  // The cap's state: the slice's shared word for this GPU in the ledger once found (every
  // process of the slice charges it, so the cap holds for the slice), else cap_tat.
  std::atomic<std::atomic<int64_t>*> slice_cap_tat{nullptr};
  // The policy the gate applies on this GPU (PackPolicy): the process's own under its named
  // slice's in the ledger (EffectivePolicy), refreshed every peer scan (FollowSlicePolicy).
  std::atomic<uint64_t> policy{PackPolicy(ComputePolicy{})};
  int slice_gpu = -1;  // the slice's entry for this GPU in the limits file, once found (-1)
  PeerSet peers;
  std::mutex turn_mu;
  ShareTurnTaker turn;  // turn_mu
  OpportunisticLimits opp;
  ControlLoop control;  // gate thread only
  KernelTiming kernels;
};

struct Gate {
  DriverApi api;
  ComputePolicy env;  // the policy this process started with (GSLICE_COMPUTE, _SHARE, _CLASS)
  // The named slice this process runs in (its index in the limits file; -1: none, or no
  // ledger) and its class when the gate first saw it (EffectivePolicy's start_class).
  int slice = -1;
  int start_class = -1;
  // Every slice's compute entries as one table (mapped by InitLaunchGate, never unmapped):
  // this process's slice's page writable, the others' read-only. nullptr: no ledger.
  ComputeWindow* window = nullptr;
  Ledger* mapping = nullptr;  // this process's slice: the limits file and GPU entries
  std::mutex devices_mu;
  Device devices[kMaxContexts];
  std::atomic<int> device_count{0};
  CUdevice visible[kMaxContexts] = {};  // visible devices (set once by InitLaunchGate)
  int visible_count = 0;
  bool visible_registered[kMaxContexts] = {};  // gate thread only
};

// The gate; nullptr until InitLaunchGate ran (then for the process's life).
extern Gate* g_gate;
// The controller's decisions and the queue bound's changes (InitLaunchGate); nullptr: none.
extern ComputeLogFn g_trace;

// The policy the gate applies on d now (one relaxed load: launching threads call it).
inline ComputePolicy PolicyOf(const Device& d) { return UnpackPolicy(d.policy.load(kRlx)); }

// Calls f(index, word) for each of d's peers (PeerSet) that is guaranteed.
template <typename F>
void ForEachGuaranteed(Device& d, F f) {
  if (g_gate->window == nullptr) return;
  const int n = d.peers.count.load(std::memory_order_acquire);
  for (int k = 0; k < n; ++k) {
    const uint32_t word = d.peers.words[k].load(kRlx);
    if (PeerGuaranteed(word)) f(PeerIndex(word), word);
  }
}

// A guaranteed process with no cap and no share contention only publishes that it is
// busy: no waiting, no measurement on the launch path (launch_gate.cc).
inline bool PublishOnly(const Device& d) {
  const ComputePolicy p = PolicyOf(d);
  return p.cls == ComputeClass::kGuaranteed && !p.capped() && !d.peers.share_peer.load(kRlx);
}

// A publish-only process on a GPU shared through MPS: nothing meters or waits its launches;
// they say it wants the GPU and some are timed (GateMode::kCount where no other GPU of the
// process needs the gate).
inline bool CountsOnly(const Device& d) { return d.spatial && PublishOnly(d); }

// ---- the launch path's, also run by the gate thread (launch_gate.cc) --------------------

// Consumes completed markers of every stream of d; the gate thread calls it every pass,
// waiting launchers call it to see their queue shrink.
void PollDevice(Device& d, int64_t now);
// Updates d.opp.near (whether opportunistic work is near guaranteed work, DepthNs) while
// launches are held back and do not.
void UpdateNear(Device& d, int64_t now);

// ---- the gate thread's, also run by the launch path (gate_thread.cc) --------------------

// Adds a device record (devices_mu held), with its policy, ledger entry and peers. nullptr
// when the table is full.
Device* AddDevice(const uint8_t uuid[16], CUdevice dev, CUcontext ctx);

}  // namespace gslice::compute
