// The launch gate: every kernel and graph launch of a gated process passes through it.
// It enforces the process's compute policy (hard cap, guaranteed share, class) on GPU time
// measured by gpu_meter.h, and publishes what other processes' gates need (is this process
// contending, has it queued work, its virtual time) in the node ledger's compute table.
//
// Use from the shim's launch hooks:
//
//   if (gslice::compute::LaunchThroughGate()) {
//     const auto ticket = gslice::compute::BeforeLaunch(stream, per_thread);   // may wait
//     CUresult r = real_launch(...);
//     gslice::compute::AfterLaunch(ticket);
//     return r;
//   }
//   return real_launch(...);
//
// LaunchThroughGate() is one relaxed load for a process with no compute policy and no peers
// that need it to publish: it pays nothing else. docs/compute.md explains the design.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace gslice::compute {

enum class GateMode : int {
  kOff = 0,    // not initialised or no policy possible: launches pass untouched
  kWatch = 1,  // registered; a background thread watches for peers, launches pass untouched
  kGate = 2,   // launches go through BeforeLaunch/AfterLaunch
  // Launches are counted, and now and then one goes through BeforeLaunch/AfterLaunch to be
  // timed: a guaranteed process with no cap and no share contention whose only peers are
  // opportunistic ones on GPUs shared through MPS. Nothing judges its launches or waits them
  // there (mps_controller.h): the timed launches say it wants the GPU and give its kernels'
  // times (gate_state.h, KernelTiming, LaunchCount).
  kCount = 3,
};

extern std::atomic<int> g_gate_mode;

// Counts a launch and says whether it is to be timed (launch_gate.cc): every launch while
// counting (kCount, from LaunchThroughGate), those that reach kernel timing while gating.
bool CountLaunch();

// The host's waits on the GPU (kernel_clock.h, "the critical path"): the synchronising hooks
// (a stream's, an event's or the context's synchronisation, synchronous copies) time their
// call and add it with CountWait where WaitsCounted() says the gate wants it: since a GPU of
// this process was first read on MPS beside opportunistic work (gate_state.h, LaunchCount).
// Two clock reads on a call that waits for the GPU anyway; nothing on the launch path.
bool WaitsCounted();
void CountWait(int64_t ns);

// An opportunistic process on MPS says it has work queued while one of its threads waits on
// the GPU (WaitsSayQueued: since the gate thread first saw it there): the same hooks bracket
// their call with WaitBegins and WaitEnds, and the gate thread says so while any thread is
// inside (PollDevice). A job that queues a step's kernels and then waits for them stops
// launching while its kernels run; its launches' hold (kUngatedHoldNs) would lapse, and a
// guaranteed peer would time its own kernels beside them as alone. Two atomic adds on a call
// that waits for the GPU anyway.
bool WaitsSayQueued();
void WaitBegins();
void WaitEnds();

struct Device;
class StreamMeter;
struct KernelShape;
// A launch whose GPU time the gate measures (gate_state.h, KernelTiming): its start event, key,
// when it was launched, and whether its stream had run dry before it (the start event done once
// the launch returned: MeasuresTheKernel in kernel_clock.h).
struct KernelSample {
  CUevent start = nullptr, end = nullptr;
  uint64_t key = 0;
  int64_t launched_ns = 0;
  bool stream_dry = false;
};

// Whether launches are gated now (kGate): the gate meters this process's GPU time.
inline bool LaunchGateActive() { return g_gate_mode.load(std::memory_order_relaxed) == static_cast<int>(GateMode::kGate); }

// Whether this launch goes through BeforeLaunch and AfterLaunch: every launch while gating,
// the timed ones while counting (kCount), none otherwise. The one question a launch hook asks.
inline bool LaunchThroughGate() {
  const int mode = g_gate_mode.load(std::memory_order_relaxed);
  if (mode == static_cast<int>(GateMode::kGate)) return true;
  return mode == static_cast<int>(GateMode::kCount) && CountLaunch();
}

using ComputeLogFn = void (*)(const char* line);

// Reads GSLICE_COMPUTE, GSLICE_SHARE, GSLICE_CLASS and GSLICE_LEDGER, maps the ledger and
// starts the gate's thread. resolve returns the REAL driver's symbol for a name. log
// receives one line per event (nullptr: stderr); trace, where given, one line per decision
// of the opportunistic controller (every 250 ms while guaranteed work is busy). Idempotent
// and thread-safe. Bad policy values are logged and the process runs ungated; returns
// whether the gate runs.
bool InitLaunchGate(void* (*resolve)(const char* name), ComputeLogFn log, ComputeLogFn trace = nullptr);

// The compute class the gate applies to this process now, for the rest the class decides
// (stream priorities, launch_hooks.cc): -1 while the process has none (no GSLICE_CLASS, and
// its slice's class not changed since it started), else a ComputeClass. Follows the slice's
// class in the ledger (`gslice set --class`) within a peer scan, as the gate does.
int FollowedClass();

// What BeforeLaunch found for the AfterLaunch of the same launch: the context, the stream's
// meter and how the launch is marked. The launch runs on the calling thread in the context
// BeforeLaunch looked up, so AfterLaunch looks up and decides none of it again. Empty
// (nothing to do after the launch) where BeforeLaunch let the launch pass unmetered.
struct LaunchTicket {
  Device* device = nullptr;
  StreamMeter* meter = nullptr;
  bool eager = false;               // the marker goes right after the launch (see AfterLaunch)
  int64_t marker_spacing_ns = 0;    // the meter's marker spacing for this launch (0: every launch)
  KernelSample sample = {};         // a timed launch (sample.start set): its end event follows it
  CUstream stream = nullptr;        // ... on this stream
};

// Around a launch on stream (per_thread: the _ptsz variant, where stream 0 means the
// calling thread's default stream). shape: the kernel (or graph) launched, for kernel timing
// (nullptr: not timed). ctx: the calling thread's current context where the caller has just
// read it (the launch path reads it once), nullptr to have it read. BeforeLaunch may wait;
// neither ever fails the launch.
// REQUIRES: AfterLaunch on the thread that called BeforeLaunch, with its ticket.
LaunchTicket BeforeLaunch(CUstream stream, bool per_thread, const KernelShape* shape = nullptr,
                          CUcontext ctx = nullptr);
void AfterLaunch(const LaunchTicket& ticket);

// ctx is about to be destroyed, or reset or released for the last time as a primary
// context (its events and streams go with it): the gate drops its markers, events and
// stream meters of ctx unused, after waiting for a pass of the gate thread under way (at
// most 20 ms), so the driver never sees them again, and ContextEpoch() moves. Call before
// the driver's call.
void ForgetContext(CUcontext ctx);

// Moves whenever a context is forgotten: what a thread cached about its context (gate
// records here, raised default streams in the shim) expires, since a later context may
// reuse the handle.
extern std::atomic<uint64_t> g_context_epoch;
inline uint64_t ContextEpoch() { return g_context_epoch.load(std::memory_order_acquire); }

// GPU time this process was measured to use on the current context's device, ns (tests,
// statistics). Includes time completed by now; call after synchronising for a final value.
uint64_t MeasuredBusyNs();
// The same summed over every device this process's gate meters, without polling (the gate's
// thread keeps it current): for the timeline's utilisation counter, from any thread.
uint64_t MeasuredBusyNsAllDevices();

// How many times the calling thread slept in BeforeLaunch so far: a launch whose
// BeforeLaunch moved it waited at the gate (the timeline's "compute gate wait").
uint32_t WaitsOfThisThread();

}  // namespace gslice::compute
