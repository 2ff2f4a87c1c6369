#include "launch_gate.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <new>

#include "controller.h"
#include "gpu_meter.h"
#include "gslice/ledger.h"
#include "gslice/options.h"
#include "gslice/quiet_thread.h"
#include "gslice/units.h"
#include "mps_controller.h"
#include "policy.h"
#include "time_sliced_controller.h"

namespace gslice::compute {

std::atomic<int> g_gate_mode{0};
std::atomic<uint64_t> g_context_epoch{0};

namespace {

constexpr auto kRlx = std::memory_order_relaxed;
constexpr int kMaxContexts = 16;  // GPUs (contexts) of one process the gate follows
constexpr int kMaxStreams = 256;  // metered streams per GPU; launches on more pass unmetered
// Peers on one GPU a gate follows (compute entries of any slice on the same GPU).
constexpr int kMaxPeers = kMaxControlledPeers;
// The gate thread's pass while gating: it publishes this process's queued work and samples
// the guaranteed peers, so its period bounds how stale both are (the lazy markers' spacing).
constexpr int64_t kPollGateNs = 200'000;
// ... while only watching for peers, and the peer scan: a guaranteed process that starts is
// seen this soon, well before a framework's first kernel.
constexpr int64_t kPollWatchNs = 10'000'000;
constexpr int64_t kPeerScanNs = 10'000'000;
// The mean launch cost (the depth bound's estimate of queued work) before any is measured,
// and how many polls' samples it averages over (an exponential mean).
constexpr int64_t kInitialMeanLaunchNs = 20'000;
constexpr int64_t kMeanLaunchPolls = 8;
// A launch waiting at the gate sleeps at most kMaxNapNs at a time (it stays "active" for its
// peers while asleep), and kQueuePollNs while its queue is over the depth bound.
constexpr int64_t kMaxNapNs = 1'000'000;
constexpr int64_t kQueuePollNs = 20'000;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// SleepNs with the calling thread's timer slack at 1 us for the wait, restored after: with
// Linux's default slack (50 us) a 20 us wait may last up to 70 us.
void SleepPreciseNs(int64_t ns) {
  const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  const bool lower = slack > 1000;
  if (lower) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  SleepNs(ns);
  if (lower) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0, 0, 0);
}

uint64_t ThreadKey() {
  static thread_local uint64_t tid = static_cast<uint64_t>(syscall(SYS_gettid));
  return tid;
}

ComputeLogFn g_log = nullptr;
ComputeLogFn g_trace = nullptr;  // the controller's decisions (InitLaunchGate)

void LogLine(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogLine(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (g_log != nullptr) {
    g_log(buf);
  } else {
    dprintf(2, "gslice: %s\n", buf);
  }
}

// A line of the controller's trace (nothing unless tracing).
void TraceLine(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void TraceLine(const char* fmt, ...) {
  if (g_trace == nullptr) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_trace(buf);
}

// A peer as the gate thread's scan found it, in one word so that launching threads read it
// whole: its compute entry's index, its class and its floor (controller.h, PeerPeriod).
constexpr uint32_t kPeerIndexMask = 0xffffu;
constexpr int kPeerFloorShift = 16;
constexpr uint32_t kPeerFloorMask = 0x7ffu;  // floors are at most 1000 permille
constexpr uint32_t kPeerGuaranteed = 1u << 31;
static_assert(kLedgerMaxComputeEntries <= static_cast<int>(kPeerIndexMask) + 1);
constexpr uint32_t PackPeer(int index, bool guaranteed, uint32_t floor_permille) {
  return static_cast<uint32_t>(index) | ((floor_permille & kPeerFloorMask) << kPeerFloorShift) |
         (guaranteed ? kPeerGuaranteed : 0u);
}
constexpr int PeerIndex(uint32_t word) { return static_cast<int>(word & kPeerIndexMask); }
constexpr bool PeerGuaranteed(uint32_t word) { return (word & kPeerGuaranteed) != 0; }
constexpr uint32_t PeerFloor(uint32_t word) { return (word >> kPeerFloorShift) & kPeerFloorMask; }

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

// The other alive entries on this GPU, refreshed by the gate thread (ScanPeers).
struct PeerSet {
  std::atomic<int> count{0};
  std::atomic<uint32_t> words[kMaxPeers] = {};  // PackPeer
  std::atomic<int> opportunistic{0};  // how many (the gate's mode, the controllers)
  std::atomic<int> guaranteed{0};     // how many (NothingToYieldTo)
  std::atomic<bool> share_peer{false};  // one of them takes exclusive turns with us
};

// The share turn among peers that take turns (launching threads, under mu).
struct TurnState {
  std::mutex mu;
  bool running = false;     // holds the turn
  bool was_active = false;  // contended at the previous launch
  int64_t take_since = 0;   // the turn is ours since then, once the last runner drains
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
};

// The gate thread's side of the controller: it samples the guaranteed peers every pass, and
// every kControlPeriodNs hands the period to the GPU's controller.
struct ControlLoop {
  int64_t next_ns = 0;
  int64_t last_sample_ns = 0;
  bool busy_seen = false;  // a guaranteed peer was busy in the period so far
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

}  // namespace

// One context (one GPU) of this process (declared in launch_gate.h for LaunchTicket).
struct Device {
  std::atomic<CUcontext> ctx{nullptr};  // bound at the first gated launch in a context
  uint8_t uuid[16] = {};
  // The GPU is shared through MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED): processes' kernels run
  // concurrently, not in turns (mps_controller.h).
  bool spatial = false;
  LedgerComputeEntry* entry = nullptr;  // this process's entry in the ledger (or local)
  LedgerComputeEntry local_entry{};      // used when the ledger has no room
  DeviceMeter meter;
  std::atomic<int64_t> cap_tat{0};
  // The cap's state: the slice's shared word for this GPU in the ledger once found (every
  // process of the slice charges it, so the cap holds for the slice), else cap_tat.
  std::atomic<std::atomic<int64_t>*> slice_cap_tat{nullptr};
  // The policy the gate applies on this GPU (PackPolicy): the process's own under its named
  // slice's in the ledger (EffectivePolicy), refreshed every peer scan (FollowSlicePolicy).
  // Written by the gate thread (and AddDevice before the device is published); launching
  // threads load it whole.
  std::atomic<uint64_t> policy{PackPolicy(ComputePolicy{})};
  int slice_gpu = -1;  // the slice's entry for this GPU in the limits file, once found (-1)
  PeerSet peers;
  TurnState turn;
  OpportunisticLimits opp;
  ControlLoop control;  // gate thread only
};

namespace {

struct Gate {
  DriverApi api;
  ComputePolicy env;  // the policy this process started with (GSLICE_COMPUTE, _SHARE, _CLASS)
  // The named slice this process runs in (its index in the limits file; -1: none, or no
  // ledger) and its class when the gate first saw it (EffectivePolicy's start_class).
  int slice = -1;
  int start_class = -1;
  // Every slice's compute entries as one table (mapped by InitOnce, never unmapped): this
  // process's slice's page writable, the others' read-only. nullptr: no ledger.
  ComputeWindow* window = nullptr;
  Ledger* mapping = nullptr;  // this process's slice: the limits file and GPU entries
  std::mutex devices_mu;
  Device devices[kMaxContexts];
  std::atomic<int> device_count{0};
  CUdevice visible[kMaxContexts] = {};  // visible devices (set once by InitOnce)
  int visible_count = 0;
  bool visible_registered[kMaxContexts] = {};  // gate thread only
};

Gate* g_gate = nullptr;
std::once_flag g_init_once;
bool g_init_ok = false;

// The policy the gate applies on d now (one relaxed load: launching threads call it).
ComputePolicy PolicyOf(const Device& d) { return UnpackPolicy(d.policy.load(kRlx)); }

// ---- ledger compute table -----------------------------------------------------------

// Exit: the gate thread must make no more driver calls once exit handlers run (the driver's
// own teardown may free the events and streams it would touch). ReleaseEntries, an atexit
// handler registered after the driver loaded, runs before the driver's destructors: it
// stops the thread and waits for a pass in progress to end (Dekker-style: the thread
// raises g_in_pass before it looks at g_stop, exit raises g_stop before it looks at
// g_in_pass; both seq_cst, so one of them always sees the other).
std::atomic<bool> g_stop{false};
std::atomic<bool> g_in_pass{false};
std::atomic<uint64_t> g_passes{0};  // gate-thread passes ended
constexpr int64_t kExitWaitStepNs = 10'000;
constexpr int kExitWaitSteps = 2000;  // at most 20 ms for a pass under way

void ReleaseEntries() {
  g_stop.store(true, std::memory_order_seq_cst);
  g_gate_mode.store(static_cast<int>(GateMode::kOff), kRlx);
  for (int i = 0; i < kExitWaitSteps && g_in_pass.load(std::memory_order_seq_cst); ++i) SleepNs(kExitWaitStepNs);
  if (g_gate == nullptr || g_gate->window == nullptr) return;
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    Device& d = g_gate->devices[i];
    if (d.entry != &d.local_entry) g_gate->window->ReleaseEntry(d.entry);
  }
}

// d's index in the ledger's compute table; -1 when it has a local entry.
int EntryIndex(const Device& d) {
  if (g_gate->window == nullptr || d.entry == &d.local_entry) return -1;
  return g_gate->window->index_of(d.entry);
}

// 1 + the slice whose cap compute entry i charges; 0: none.
uint32_t CapSliceOf(int i) { return i < 0 ? 0 : g_gate->window->entry(i).cap_slice.load(kRlx); }

// Finds the slice's GPU entry for d's GPU, and with it the slice's shared cap word (gate
// thread, with the peer scan): the slice and its GPU entry appear in the ledger once the
// memory side (or the slice's writer) has seen the GPU.
void FindSliceGpu(Device& d) {
  if (g_gate->slice < 0 || d.slice_gpu >= 0) return;
  const int gpu = g_gate->mapping->FindGpu(g_gate->slice, d.uuid);
  if (gpu < 0) return;
  d.slice_cap_tat.store(&g_gate->window->own_head()->cap_tat[gpu], std::memory_order_release);
  d.slice_gpu = gpu;
}

// What d's ledger entry's cap_slice says under policy p: 1 + the slice while p caps it and the
// slice's cap word for the GPU is found, else 0.
uint32_t CapSliceFor(const Device& d, const ComputePolicy& p) {
  return p.capped() && d.slice_cap_tat.load(kRlx) != nullptr ? static_cast<uint32_t>(g_gate->slice) + 1 : 0u;
}

// Applies a new policy on d: launching threads see it at their next load, and peers see its
// share, class and cap (the entry's fields) at their next scan. A capped entry names its
// slice, so that the slice's other processes on this GPU take exclusive turns with it
// (ScanPeers); the share's weight and flag change in place, the turn bits stay.
void ApplyPolicy(Device& d, const ComputePolicy& p) {
  d.policy.store(PackPolicy(p), kRlx);
  if (d.entry == nullptr) return;  // AddDevice claims the entry with this policy
  uint32_t share = d.entry->share_permille.load(kRlx);
  uint32_t want;
  do {
    want = (share & ~(kComputeShareMask | kComputeShareSet)) | p.share_permille | (p.share_set ? kComputeShareSet : 0u);
  } while (share != want && !d.entry->share_permille.compare_exchange_weak(share, want, kRlx));
  d.entry->slice_class.store(static_cast<uint32_t>(p.cls), kRlx);
  if (EntryIndex(d) >= 0) d.entry->cap_slice.store(CapSliceFor(d, p), kRlx);
}

// Every peer scan (kPeerScanNs, the gate thread; and AddDevice), on one GPU: the slice's class
// and, once the slice's entry for the GPU is found, its policy words there (three loads on the
// mapped limits file), with what changed applied. The gate's mode follows at the same pass's
// end (WantedMode), so a change applies within one scan.
void FollowSlicePolicy(Device& d) {
  if (g_gate->slice < 0) return;
  FindSliceGpu(d);
  const LedgerComputePolicy words =
      d.slice_gpu >= 0 ? g_gate->mapping->ComputePolicy(g_gate->slice, d.slice_gpu) : LedgerComputePolicy{};
  const SlicePolicy slice = {
      .cap_permille = words.cap_permille,
      .share_permille = words.share_permille,
      .slice_class = static_cast<int>(
          __atomic_load_n(&g_gate->mapping->limits()->slices[g_gate->slice].slice_class, __ATOMIC_RELAXED)),
  };
  const ComputePolicy p = EffectivePolicy(g_gate->env, slice, g_gate->start_class);
  const uint64_t word = PackPolicy(p);
  const uint64_t before = d.policy.load(kRlx);
  // The entry's cap_slice also waits for the slice's cap word (FindSliceGpu), so apply once
  // when the GPU entry is first found even where the policy is the same.
  if (word == before && d.entry != nullptr && (EntryIndex(d) < 0 || d.entry->cap_slice.load(kRlx) == CapSliceFor(d, p))) {
    return;
  }
  ApplyPolicy(d, p);
  if (word != before) {
    TraceLine("compute: slice policy on this GPU now cap %u permille, share %u permille%s, %s", p.cap_permille,
              p.share_permille, p.share_set ? "" : " (none given)",
              p.cls == ComputeClass::kOpportunistic ? "opportunistic" : "guaranteed");
  }
}

// The slice of compute entry i in the limits file (written only by the ledger's writer;
// every gate maps it read-only).
const LedgerSlice& SliceOfEntry(int i) { return g_gate->mapping->limits()->slices[ComputeSliceOf(i)]; }

// The class compute entry i counts with: guaranteed only where both its slice in the limits
// file and the entry say so. An entry is written by its own process, which may report itself
// opportunistic but cannot promote itself above its slice.
ComputeClass PeerClass(int i, const LedgerComputeEntry& e) {
  const uint32_t slice_class = __atomic_load_n(&SliceOfEntry(i).slice_class, __ATOMIC_RELAXED);
  const bool guaranteed = slice_class != static_cast<uint32_t>(SliceClass::kOpportunistic) &&
                          e.slice_class.load(kRlx) == static_cast<uint32_t>(ComputeClass::kGuaranteed);
  return guaranteed ? ComputeClass::kGuaranteed : ComputeClass::kOpportunistic;
}

// The floor compute entry i's slice sets (its protection level): 0 is the default, a value
// outside the valid range counts as its nearest bound.
uint32_t PeerFloorPermille(int i) {
  const uint32_t v = __atomic_load_n(&SliceOfEntry(i).protect_permille, __ATOMIC_RELAXED);
  return v == 0 ? kProtectDefaultPermille : std::clamp(v, kProtectMinPermille, kProtectMaxPermille);
}

// Refreshes d's peer list (alive entries on the same GPU, not ours) and frees dead ones.
// Peers of our class take exclusive turns with us (share_peer) when either side gave a
// share explicitly, or when both belong to one capped slice: on a GPU that time-slices
// processes, each one's measured intervals would otherwise include the other's time, and the
// slice would be charged for it twice. Whether we take turns is published
// (kComputeTakesTurns), so that peers that do not are not waited for.
void ScanPeers(Device& d) {
  if (g_gate->window == nullptr) return;
  g_gate->window->Refresh();  // system calls only when a slice came, went or was recycled
  FollowSlicePolicy(d);
  ComputeWindow& w = *g_gate->window;
  int n = 0;
  bool share = false;
  int opp = 0;
  int guaranteed = 0;
  const ComputePolicy mine = PolicyOf(d);
  const bool mine_set = mine.share_set;
  const uint32_t my_slice = CapSliceOf(EntryIndex(d));
  for (int i = 0; i < kLedgerMaxComputeEntries && n < kMaxPeers; ++i) {
    if (!w.mapped(ComputeSliceOf(i))) {
      i += kLedgerSliceComputeEntries - 1 - ComputeEntryOf(i);  // the next slice's first entry
      continue;
    }
    LedgerComputeEntry& e = w.entry(i);
    if (&e == d.entry) continue;
    if (StateOf(e.state.load(std::memory_order_acquire)) != EntryState::kAlive || memcmp(e.uuid, d.uuid, 16) != 0) continue;
    if (!w.OwnerAliveElseFree(i)) continue;
    const ComputeClass cls = PeerClass(i, e);
    if (cls == ComputeClass::kOpportunistic) ++opp;
    if (cls == ComputeClass::kGuaranteed) ++guaranteed;
    if (cls == mine.cls && (mine_set || (e.share_permille.load(kRlx) & kComputeShareSet) != 0)) share = true;
    if (my_slice != 0 && CapSliceOf(i) == my_slice) share = true;
    d.peers.words[n++].store(PackPeer(i, cls == ComputeClass::kGuaranteed, PeerFloorPermille(i)), kRlx);
  }
  d.peers.count.store(n, std::memory_order_release);
  d.peers.opportunistic.store(opp, kRlx);
  d.peers.guaranteed.store(guaranteed, kRlx);
  d.peers.share_peer.store(share, kRlx);
  const bool published = (d.entry->share_permille.load(kRlx) & kComputeTakesTurns) != 0;
  if (share && !published) d.entry->share_permille.fetch_or(kComputeTakesTurns, kRlx);
  if (!share && published) d.entry->share_permille.fetch_and(~kComputeTakesTurns, kRlx);
}

// Gate when a GPU's policy limits this process (before any GPU is registered: the policy it
// started with) or peers need it to take part; else only watch.
GateMode WantedMode() {
  const auto limits = [](const ComputePolicy& p) { return p.capped() || p.cls == ComputeClass::kOpportunistic; };
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  if (n == 0 && limits(g_gate->env)) return GateMode::kGate;
  for (int i = 0; i < n; ++i) {
    const Device& d = g_gate->devices[i];
    if (limits(PolicyOf(d))) return GateMode::kGate;
    if (d.peers.opportunistic.load(kRlx) > 0 || d.peers.share_peer.load(kRlx)) return GateMode::kGate;
  }
  return GateMode::kWatch;
}

// ---- measurement -------------------------------------------------------------------

std::atomic<int64_t>& CapTat(Device& d) {
  std::atomic<int64_t>* shared = d.slice_cap_tat.load(std::memory_order_acquire);
  return shared != nullptr ? *shared : d.cap_tat;
}

void Charge(Device& d, int64_t busy, int64_t now) {
  if (busy <= 0) return;
  d.meter.busy_total.fetch_add(busy, kRlx);
  const ComputePolicy p = PolicyOf(d);
  d.entry->vtime_ns.fetch_add(VtimeIncrement(busy, p.share_permille), kRlx);
  if (p.capped()) GcraCharge(CapTat(d), now, busy, p.cap_permille);
  const uint32_t opp_rate = d.opp.rate_permille.load(kRlx);
  if (opp_rate > 0 && opp_rate < 1000) GcraCharge(d.opp.tat, now, busy, opp_rate);  // 1000: no limit
}

uint64_t Outstanding(Device& d) {
  uint64_t n = 0;
  const int count = d.meter.stream_count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) n += d.meter.streams[i].load(std::memory_order_acquire)->outstanding();
  return n;
}

// Consumes completed markers of every stream of d; the gate thread calls it every poll,
// waiting launchers call it to see their queue shrink.
void PollDevice(Device& d, int64_t now) {
  std::lock_guard<std::mutex> lock(d.meter.poll_mu);
  const int count = d.meter.stream_count.load(std::memory_order_acquire);
  int64_t busy = 0;
  uint64_t launches = 0, outstanding = 0;
  for (int i = 0; i < count; ++i) {
    StreamMeter* m = d.meter.streams[i].load(std::memory_order_acquire);
    busy += m->Poll(g_gate->api, d.meter.pool, now);
    launches += m->launches();
    outstanding += m->outstanding();
  }
  Charge(d, busy, now);
  const uint64_t done = launches - outstanding;
  if (busy > 0 && done > d.meter.last_done) {
    const int64_t sample = busy / static_cast<int64_t>(done - d.meter.last_done);
    const int64_t mean = d.meter.mean_launch_ns.load(kRlx);
    d.meter.mean_launch_ns.store(mean + (sample - mean) / kMeanLaunchPolls, kRlx);
  }
  d.meter.last_done = done;
  // Publish whether queued work remains (CAS so a launch's fresher store is not lost).
  int64_t inflight = d.entry->inflight_until_ns.load(kRlx);
  const int64_t want = outstanding > 0 ? now + kInflightHoldNs : 0;
  if (outstanding > 0 || inflight != 0) d.entry->inflight_until_ns.compare_exchange_strong(inflight, want, kRlx);
}

// ---- devices and streams -----------------------------------------------------------

// Adds a device record (devices_mu held). nullptr when the table is full.
Device* AddDevice(const uint8_t uuid[16], CUdevice dev, CUcontext ctx) {
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  if (n == kMaxContexts) return nullptr;
  Device& d = g_gate->devices[n];
  memcpy(d.uuid, uuid, 16);
  int mps = 0;
  d.spatial = g_gate->api.device_get_attribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == CUDA_SUCCESS && mps != 0;
  // The slice's policy on this GPU where the ledger has it already, else the process's own.
  d.policy.store(PackPolicy(g_gate->env), kRlx);
  if (g_gate->window != nullptr) FollowSlicePolicy(d);
  if (d.spatial && PolicyOf(d).cls == ComputeClass::kOpportunistic) {
    LogLine("compute: the GPU is shared through MPS; opportunistic work runs beside guaranteed work at low priority");
  }
  d.ctx.store(ctx, std::memory_order_release);
  const ComputePolicy p = PolicyOf(d);
  if (g_gate->window != nullptr) {
    d.entry = g_gate->window->ClaimEntry(d.uuid, static_cast<SliceClass>(p.cls),
                                         p.share_permille | (p.share_set ? kComputeShareSet : 0u));
  }
  if (d.entry == nullptr) {
    if (g_gate->window != nullptr) {
      LogLine("compute: the ledger's compute table is full; this process's cap holds, but other slices do not see it");
    }
    d.entry = &d.local_entry;
  }
  ScanPeers(d);
  g_gate->device_count.store(n + 1, std::memory_order_release);
  return &d;
}

Device* CurrentDevice() {
  CUcontext ctx = nullptr;
  if (g_gate->api.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
  static thread_local CUcontext cached_ctx = nullptr;
  static thread_local Device* cached = nullptr;
  static thread_local uint64_t cached_epoch = 0;
  const uint64_t epoch = ContextEpoch();
  if (ctx == cached_ctx && cached != nullptr && epoch == cached_epoch) return cached;
  Device* found = nullptr;
  int n = g_gate->device_count.load(std::memory_order_acquire);
  for (int i = 0; i < n && found == nullptr; ++i) {
    if (g_gate->devices[i].ctx.load(std::memory_order_acquire) == ctx) found = &g_gate->devices[i];
  }
  if (found == nullptr) {
    CUdevice dev = 0;
    CUuuid uuid{};
    if (g_gate->api.ctx_get_device(&dev) != CUDA_SUCCESS || g_gate->api.device_get_uuid(&uuid, dev) != CUDA_SUCCESS) {
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(g_gate->devices_mu);
    n = g_gate->device_count.load(std::memory_order_acquire);
    for (int i = 0; i < n && found == nullptr; ++i) {
      Device& d = g_gate->devices[i];
      CUcontext c = d.ctx.load(std::memory_order_acquire);
      if (c == ctx || (c == nullptr && memcmp(d.uuid, uuid.bytes, 16) == 0)) {
        d.ctx.store(ctx, std::memory_order_release);
        found = &d;
      }
    }
    if (found == nullptr) found = AddDevice(reinterpret_cast<const uint8_t*>(uuid.bytes), dev, ctx);
    if (found == nullptr) return nullptr;
  }
  cached_ctx = ctx;
  cached = found;
  cached_epoch = epoch;
  return found;
}

StreamMeter* FindStream(Device& d, CUstream stream, uint64_t thread_key) {
  static thread_local Device* cached_dev = nullptr;
  static thread_local CUstream cached_stream = nullptr;
  static thread_local StreamMeter* cached = nullptr;
  if (cached_dev == &d && cached_stream == stream && cached != nullptr && cached->thread_key() == thread_key) return cached;
  std::lock_guard<std::mutex> lock(d.meter.streams_mu);
  const int n = d.meter.stream_count.load(std::memory_order_acquire);
  StreamMeter* found = nullptr;
  for (int i = 0; i < n; ++i) {
    StreamMeter* m = d.meter.streams[i].load(std::memory_order_acquire);
    if (m->stream() == stream && m->thread_key() == thread_key) {
      found = m;
      break;
    }
  }
  if (found == nullptr) {
    if (n == kMaxStreams) return nullptr;  // unmetered beyond this many streams
    found = new (std::nothrow) StreamMeter;
    if (found == nullptr) return nullptr;
    d.meter.streams[n].store(found, std::memory_order_release);
    found->Reset(stream, thread_key, /*lazy_markers=*/stream != CU_STREAM_PER_THREAD);
    d.meter.stream_count.store(n + 1, std::memory_order_release);
  }
  cached_dev = &d;
  cached_stream = stream;
  cached = found;
  return found;
}

// ---- decisions ---------------------------------------------------------------------

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

// A guaranteed peer has work queued or wanted the GPU at now.
bool GuaranteedBusy(Device& d, int64_t now) {
  if (g_gate->window == nullptr) return false;
  const int n = d.peers.count.load(std::memory_order_acquire);
  for (int k = 0; k < n; ++k) {
    const uint32_t word = d.peers.words[k].load(kRlx);
    if (!PeerGuaranteed(word)) continue;
    const LedgerComputeEntry& e = g_gate->window->entry(PeerIndex(word));
    if (e.inflight_until_ns.load(kRlx) > now || e.active_until_ns.load(kRlx) > now) return true;
  }
  return false;
}

// The sample of the peer in compute entry i (gate thread): found by index, else a record no
// current peer uses, reset (its owner word no longer matches, so callers treat it as a new
// process).
ControlLoop::Sample& SampleOf(Device& d, int i) {
  ControlLoop& c = d.control;
  for (ControlLoop::Sample& s : c.samples) {
    if (s.index == i) return s;
  }
  const int n = d.peers.count.load(std::memory_order_acquire);
  for (ControlLoop::Sample& s : c.samples) {
    bool in_use = false;
    for (int k = 0; k < n && s.index >= 0 && !in_use; ++k) in_use = PeerIndex(d.peers.words[k].load(kRlx)) == s.index;
    if (!in_use) {
      s = {.index = i};
      return s;
    }
  }
  return c.samples[0];  // unreachable: there are as many records as peers
}

// Every gate-thread pass: the time since the last pass counts as busy for each guaranteed
// peer with work queued, and as overlap where this process had work queued too (both read
// as inflight_until_ns, which PollDevice has just published for this process). A pass late
// by more than kMaxSampleNs counts only that much (the state in between is unknown).
// Returns GuaranteedBusy(d, now).
constexpr int64_t kMaxSampleNs = 5'000'000;
bool SampleGuaranteed(Device& d, int64_t now) {
  ControlLoop& c = d.control;
  int64_t dt = c.last_sample_ns == 0 ? 0 : now - c.last_sample_ns;
  if (dt > kMaxSampleNs) dt = kMaxSampleNs;
  c.last_sample_ns = now;
  bool busy = false;
  const bool mine = d.entry->inflight_until_ns.load(kRlx) > now;
  ForEachGuaranteed(d, [&](int i, uint32_t) {
    const LedgerComputeEntry& e = g_gate->window->entry(i);
    ControlLoop::Sample& s = SampleOf(d, i);
    const uint64_t owner = e.state.load(kRlx);
    if (s.owner != owner) s = {.index = i, .owner = owner, .last_launches = e.launches.load(kRlx)};  // a new process
    const bool queued = e.inflight_until_ns.load(kRlx) > now;
    if (queued) s.busy_ns += dt;
    if (queued && mine) s.overlap_ns += dt;
    busy |= queued || e.active_until_ns.load(kRlx) > now;
  });
  return busy;
}

// Ends a control period: each sampled guaranteed peer's launches, busy and overlap time in it,
// with its floor, into period.
void ClosePeriod(Device& d, ControlPeriod* period) {
  ForEachGuaranteed(d, [&](int i, uint32_t word) {
    const LedgerComputeEntry& e = g_gate->window->entry(i);
    ControlLoop::Sample& s = SampleOf(d, i);
    if (s.owner != e.state.load(kRlx) || period->count == kMaxControlledPeers) return;  // not sampled yet
    const uint64_t now_launches = e.launches.load(kRlx);
    const uint64_t launches = now_launches >= s.last_launches ? now_launches - s.last_launches : now_launches;
    s.last_launches = now_launches;
    period->peers[period->count++] = {.id = i, .owner = s.owner, .launches = launches, .busy_ns = s.busy_ns,
                                      .overlap_ns = s.overlap_ns, .floor_permille = PeerFloor(word)};
    s.busy_ns = 0;
    s.overlap_ns = 0;
  });
}

// The opportunistic rate controller's loop, run by the gate thread every pass: samples the
// guaranteed peers, and once per kControlPeriodNs hands the period to the GPU's controller
// (time-sliced or MPS) and publishes its decision for the launching threads.
void ControlOpportunisticRate(Device& d, int64_t now) {
  ControlLoop& c = d.control;
  if (SampleGuaranteed(d, now)) c.busy_seen = true;
  if (now < c.next_ns) return;
  c.next_ns = now + kControlPeriodNs;
  ControlPeriod period;
  period.guaranteed_busy = c.busy_seen;
  period.opportunistic_peers = d.peers.opportunistic.load(kRlx);
  c.busy_seen = false;
  ClosePeriod(d, &period);
  const ControlDecision decision = d.spatial ? c.mps.Decide(period, now) : c.time_sliced.Decide(period);
  if (decision.forget_budget) d.opp.tat.store(0, kRlx);
  d.opp.probe_pause.store(decision.probe_pause, kRlx);
  d.opp.gap_ns.store(decision.gap_ns, kRlx);
  d.opp.rate_permille.store(decision.rate_permille, kRlx);
  for (const char* line : decision.trace) {
    if (line[0] != '\0') TraceLine("%s", line);
  }
}

constexpr uint32_t kRunningBit = kComputeShareRunning;

void SetRunning(Device& d, bool running) {
  if (d.turn.running == running) return;
  d.turn.running = running;
  if (running) {
    d.entry->share_permille.fetch_or(kRunningBit, kRlx);
  } else {
    d.entry->share_permille.fetch_and(~kRunningBit, kRlx);
  }
}

struct Contenders {
  int64_t min_vtime = INT64_MAX;  // lowest virtual time among them; INT64_MAX: none
  bool inflight = false;          // one of them still has queued work
  bool running = false;           // one of them holds the turn
};

// The other processes of our class that take turns and contend for this GPU now: waiting at
// their gate (active) or with work queued (inflight). Dead ones stop contending by
// themselves: their times are only ever refreshed by their own threads.
Contenders FindContenders(Device& d, int64_t now) {
  Contenders c;
  if (g_gate->window == nullptr || !d.peers.share_peer.load(kRlx)) return c;
  const int n = d.peers.count.load(std::memory_order_acquire);
  const bool guaranteed = PolicyOf(d).cls == ComputeClass::kGuaranteed;
  for (int i = 0; i < n; ++i) {
    const uint32_t word = d.peers.words[i].load(kRlx);
    if (PeerGuaranteed(word) != guaranteed) continue;  // not of our class
    LedgerComputeEntry& e = g_gate->window->entry(PeerIndex(word));
    if ((e.share_permille.load(kRlx) & kComputeTakesTurns) == 0) continue;
    const bool queued = e.inflight_until_ns.load(kRlx) > now;
    if (!queued && e.active_until_ns.load(kRlx) <= now) continue;
    const int64_t v = e.vtime_ns.load(kRlx);
    if (v < c.min_vtime) c.min_vtime = v;
    if (queued) c.inflight = true;
    if ((e.share_permille.load(kRlx) & kRunningBit) != 0) c.running = true;
  }
  return c;
}

// How long a launch waits before it looks again: held back by the opportunistic controller
// (short against the gate thread's decisions, which may free it), waiting for the share turn
// (a turn lasts kShareQuantumNs), and for the last runner's queue to drain.
constexpr int64_t kHeldBackNs = 100'000;
constexpr int64_t kTurnWaitNs = 200'000;
constexpr int64_t kDrainPollNs = 50'000;

// How long to wait before launching on d now; 0: go.
int64_t WaitBeforeLaunch(Device& d, int64_t now) {
  const ComputePolicy p = PolicyOf(d);
  int64_t wait = 0;
  if (p.capped()) wait = GcraWaitNs(CapTat(d).load(kRlx), now);
  if (p.cls == ComputeClass::kOpportunistic && d.opp.probe_pause.load(kRlx) && GuaranteedBusy(d, now - kProbeGapNs)) {
    wait = wait > kHeldBackNs ? wait : kHeldBackNs;  // the controller is measuring guaranteed work alone
  } else if (p.cls == ComputeClass::kOpportunistic && GuaranteedBusy(d, now - d.opp.gap_ns.load(kRlx))) {
    // Guaranteed work is busy (or idle for less than the gap level): only the controller's
    // rate (0: none).
    const uint32_t r = d.opp.rate_permille.load(kRlx);
    const int64_t w = r == 0 ? kHeldBackNs : r >= 1000 ? 0 : GcraWaitNs(d.opp.tat.load(kRlx), now);
    if (w > wait) wait = w;
  }
  if (wait > 0) return wait;
  const Contenders c = FindContenders(d, now);
  std::lock_guard<std::mutex> lock(d.turn.mu);
  if (c.min_vtime == INT64_MAX) {
    d.turn.was_active = false;
    d.turn.take_since = 0;
    SetRunning(d, false);
    return 0;
  }
  int64_t mine = d.entry->vtime_ns.load(kRlx);
  if (!d.turn.was_active) {
    // Contention starts (for us): catch up to the others' virtual time.
    const int64_t caught = VtimeOnActivation(mine, c.min_vtime);
    if (caught != mine) d.entry->vtime_ns.fetch_add(caught - mine, kRlx);
    mine = caught;
    d.turn.was_active = true;
  }
  if (!ShareTurn(mine, c.min_vtime, d.turn.running, c.running)) {
    d.turn.take_since = 0;
    SetRunning(d, false);
    return kTurnWaitNs;
  }
  if (!d.turn.running) {
    // Taking the turn: let the previous runner's queued work drain first, so that measured
    // intervals are ours alone (bounded from the moment the turn became ours: a stalled
    // peer cannot hold us).
    if (d.turn.take_since == 0) d.turn.take_since = now;
    if (c.inflight && now - d.turn.take_since < kDrainWaitMaxNs) return kDrainPollNs;
    d.turn.take_since = 0;
    SetRunning(d, true);
  }
  return 0;
}

bool DepthBounded(Device& d) {
  const ComputePolicy p = PolicyOf(d);
  return p.capped() || p.cls == ComputeClass::kOpportunistic || d.turn.running;
}

// Debug trace of DepthNs's changes: the queue bound, and until when each guaranteed peer
// last said it had work queued and wanted the GPU (ms from now; 0 = never or cleared).
void TraceNear(Device& d, bool near, int64_t now) {
  const auto from_now = [now](int64_t t) { return t == 0 ? 0.0 : static_cast<double>(t - now) / 1e6; };
  char line[256];
  int n = snprintf(line, sizeof line, "compute: opportunistic queue %s", near ? "short (guaranteed work near)" : "deep");
  ForEachGuaranteed(d, [&](int i, uint32_t) {
    const LedgerComputeEntry& e = g_gate->window->entry(i);
    if (n < 0 || n >= static_cast<int>(sizeof line)) return;
    n += snprintf(line + n, sizeof line - n, "; entry %d inflight until %+.1f ms, active until %+.1f ms", i,
                  from_now(e.inflight_until_ns.load(kRlx)), from_now(e.active_until_ns.load(kRlx)));
  });
  g_trace(line);
}

// Opportunistic work on a time-sliced GPU keeps its queue short while guaranteed work is
// busy or was within kOpportunisticDeepAfterNs ("near"), so that guaranteed work waits little
// when it comes (back): what is queued then is what the next request of a server waits for.
// With the GPU to itself for longer, it queues as deep as capped work does (a short queue
// starves a launch-bound job). Launches and every gate thread pass update it, so it is
// current also while the controller holds launches back.
int64_t DepthNs(Device& d, int64_t now) {
  if (PolicyOf(d).cls != ComputeClass::kOpportunistic || d.spatial) return kCapDepthNs;
  const bool near = GuaranteedBusy(d, now - kOpportunisticDeepAfterNs);
  if (d.opp.near.load(kRlx) != near && d.opp.near.exchange(near, kRlx) != near && g_trace != nullptr) {
    TraceNear(d, near, now);
  }
  return near ? kOpportunisticDepthNs : kCapDepthNs;
}

// Opportunistic work with no cap and no share peer: only guaranteed peers constrain it.
bool OpportunisticOnly(const Device& d) {
  const ComputePolicy p = PolicyOf(d);
  return p.cls == ComputeClass::kOpportunistic && !p.capped() && !d.peers.share_peer.load(kRlx);
}

// Opportunistic work with no cap and no share peer marks its streams (and checks them for
// a drain) at most every kOpportunisticMarkerNs: its time only feeds the controller's
// budget and its queue bound. With a marker and a drain check per launch, a launch-bound
// job whose stream drains between launches paid two event records and a query per launch.
// Near guaranteed work (DepthNs) it marks every launch: the short queue is then bounded by
// launches, not by 100 us stretches of them, and the controller's overlap ends when the last
// queued kernel does, not at the next marker.
int64_t MarkerSpacing(const Device& d) {
  return OpportunisticOnly(d) && !d.opp.near.load(kRlx) ? kOpportunisticMarkerNs : 0;
}

// An opportunistic process with no cap and no share peer, on a GPU where no guaranteed
// process runs, has nothing to yield to: its launches go straight through, unmeasured and
// with no queue bound, as with no class (the gated path's queue bound and markers cost a
// launch-bound job a good part of its speed). A guaranteed process that starts is seen within
// one peer scan (kPeerScanNs), long before its first kernel; only then is the queue bounded.
bool NothingToYieldTo(const Device& d) { return OpportunisticOnly(d) && d.peers.guaranteed.load(kRlx) == 0; }

// A guaranteed process with no cap and no share contention only publishes that it is
// busy: no waiting, no measurement, no driver call on the launch path.
bool PublishOnly(const Device& d) {
  const ComputePolicy p = PolicyOf(d);
  return p.cls == ComputeClass::kGuaranteed && !p.capped() && !d.peers.share_peer.load(kRlx);
}

// ---- the gate thread ---------------------------------------------------------------

// Gate thread: registers visible GPUs whose primary context has become active.
void RegisterActiveDevices() {
  for (int i = 0; i < g_gate->visible_count; ++i) {
    if (g_gate->visible_registered[i]) continue;
    unsigned int flags = 0;
    int active = 0;
    CUuuid uuid{};
    const CUdevice dev = g_gate->visible[i];
    if (g_gate->api.primary_ctx_get_state(dev, &flags, &active) != CUDA_SUCCESS || !active) continue;
    if (g_gate->api.device_get_uuid(&uuid, dev) != CUDA_SUCCESS) continue;
    std::lock_guard<std::mutex> lock(g_gate->devices_mu);
    bool known = false;
    const int n = g_gate->device_count.load(std::memory_order_acquire);
    for (int k = 0; k < n && !known; ++k) known = memcmp(g_gate->devices[k].uuid, uuid.bytes, 16) == 0;
    if (!known) AddDevice(reinterpret_cast<const uint8_t*>(uuid.bytes), dev, nullptr);
    g_gate->visible_registered[i] = true;
  }
}

void* GateThread(void*) {
  int64_t last_scan = 0;
  CUcontext current = nullptr;
  uint64_t epoch = 0;
  for (;;) {
    g_in_pass.store(true, std::memory_order_seq_cst);
    if (g_stop.load(std::memory_order_seq_cst)) {
      g_in_pass.store(false, std::memory_order_seq_cst);
      for (;;) SleepNs(1'000'000'000);  // the process is exiting: no more driver calls
    }
    if (const uint64_t e = ContextEpoch(); e != epoch) {
      epoch = e;
      current = nullptr;  // it may be gone, and a new context may have its handle
    }
    const int64_t now = NowNs();
    if (now - last_scan >= kPeerScanNs) RegisterActiveDevices();
    const int n = g_gate->device_count.load(std::memory_order_acquire);
    const bool gating = g_gate_mode.load(kRlx) == static_cast<int>(GateMode::kGate);
    for (int i = 0; i < n; ++i) {
      Device& d = g_gate->devices[i];
      if (now - last_scan >= kPeerScanNs) ScanPeers(d);
      CUcontext ctx = d.ctx.load(std::memory_order_seq_cst);  // seq_cst: ForgetContext's handshake
      if (!gating || ctx == nullptr) continue;
      // Lazy markers are recorded on the app's streams from here: the context must be current.
      if (current != ctx && g_gate->api.ctx_set_current(ctx) == CUDA_SUCCESS) current = ctx;
      PollDevice(d, now);
      if (PolicyOf(d).cls == ComputeClass::kOpportunistic) {
        ControlOpportunisticRate(d, now);
        DepthNs(d, now);  // for its update of opp_near while launches are held back
      }
    }
    if (now - last_scan >= kPeerScanNs) {
      last_scan = now;
      if (!g_stop.load(std::memory_order_relaxed)) g_gate_mode.store(static_cast<int>(WantedMode()), kRlx);
    }
    g_passes.fetch_add(1, std::memory_order_seq_cst);
    g_in_pass.store(false, std::memory_order_seq_cst);
    SleepNs(gating ? kPollGateNs : kPollWatchNs);
  }
  return nullptr;
}

void InitOnce(void* (*resolve)(const char*)) {
  static Gate gate;  // its ledger mapping is never unmapped: the gate thread runs until exit
  g_gate = &gate;
  char error[256] = {};
  if (!ParseComputePolicy(OptionValue(Option::Compute), OptionValue(Option::Share), OptionValue(Option::Class),
                          &gate.env, error, sizeof error)) {
    LogLine("%s; compute is not limited for this process", error);
    return;
  }
  const char* missing = nullptr;
  if (!gate.api.Bind(resolve, &missing)) {
    LogLine("compute: the driver lacks %s; compute is not limited for this process", missing);
    return;
  }
  const char* path = OptionValue(Option::Ledger);
  // Leaked on purpose: unmapping at exit would pull the ledger from under the gate thread.
  // The entries live in this process's slice's usage file (a process outside any slice uses
  // the ledger's shared "unsliced" slice); the window shows every slice's entries.
  static Ledger* const mapping = new Ledger;
  static ComputeWindow* const window = new ComputeWindow;
  const char* slice_name = OptionValue(Option::Slice);
  // A name the shim cannot use either (too long) leaves the process outside any slice.
  const bool sliced = slice_name[0] != '\0' && strlen(slice_name) < static_cast<size_t>(kLedgerNameSize);
  const uint32_t flags = sliced && strcmp(OptionValue(Option::EphemeralSlice), "0") != 0 ? kSliceEphemeral : 0u;
  // A slice made here (a compute-only slice) takes GSLICE_PROTECT as the memory side would;
  // a bad value is the memory side's to report and leaves the default.
  const ParsedProtect protect = ParseProtect(OptionValue(Option::Protect));
  const bool opportunistic = strcmp(OptionValue(Option::Class), "opportunistic") == 0;
  const uint32_t protect_permille = sliced && protect.ok && !opportunistic ? protect.permille : 0;
  char note[640] = {};
  int slice = -1;
  if (OpenSliceLedger(mapping, path, OptionValue(Option::LedgerUsage), sliced ? slice_name : kLedgerUnslicedName,
                      SliceClass::kGuaranteed, flags, /*create_slice=*/true, &slice, note, sizeof note,
                      protect_permille) == LedgerError::kOk &&
      window->Init(mapping, slice)) {
    gate.window = window;
    gate.mapping = mapping;
    window->Refresh();
    // A named slice's policy in the ledger is followed while the process runs (FollowSlicePolicy).
    if (sliced && window->own_slice() >= 0) {
      gate.slice = window->own_slice();
      gate.start_class =
          static_cast<int>(__atomic_load_n(&mapping->limits()->slices[gate.slice].slice_class, __ATOMIC_RELAXED));
    }
    if (note[0] != '\0') TraceLine("compute: %s", note);
  } else {
    LogLine("compute: ledger %s: %s; caps hold within this process, shares and classes do not", path, note);
  }
  // The visible GPUs. Each is registered in the ledger once this process uses it: at its
  // first gated launch, or when the gate thread sees its primary context active (so that
  // peers see a guaranteed process with no policy, which never takes the gated path,
  // without a table entry for every GPU of the node).
  int count = 0;
  if (gate.api.device_get_count(&count) == CUDA_SUCCESS) {
    for (int i = 0; i < count && i < kMaxContexts; ++i) {
      if (gate.api.device_get(&gate.visible[gate.visible_count], i) == CUDA_SUCCESS) ++gate.visible_count;
    }
  }
  // The gate thread must not receive the application's signals.
  const int rc = StartQuietThread(GateThread, nullptr);
  if (rc != 0) {
    LogLine("compute: cannot start the gate thread (%s); compute is not limited", strerror(rc));
    return;
  }
  atexit(ReleaseEntries);
  g_init_ok = true;
  g_gate_mode.store(static_cast<int>(WantedMode()), kRlx);
}

}  // namespace

bool InitLaunchGate(void* (*resolve)(const char*), ComputeLogFn log, ComputeLogFn trace) {
  if (log != nullptr) g_log = log;
  if (trace != nullptr) g_trace = trace;
  std::call_once(g_init_once, InitOnce, resolve);
  return g_init_ok;
}

namespace {
thread_local uint32_t t_gate_waits = 0;  // sleeps of this thread in BeforeLaunch (WaitsOfThisThread)
}  // namespace

LaunchTicket BeforeLaunch(CUstream stream, bool per_thread) {
  if (g_gate == nullptr) return {};
  Device* d = CurrentDevice();
  if (d == nullptr || NothingToYieldTo(*d)) return {};
  const bool own_thread_stream = per_thread && (stream == nullptr || stream == CU_STREAM_PER_THREAD);
  StreamMeter* m = FindStream(*d, own_thread_stream ? CU_STREAM_PER_THREAD : stream, own_thread_stream ? ThreadKey() : 0);
  if (PublishOnly(*d) && !own_thread_stream) {
    const int64_t now = NowNs();
    d->entry->active_until_ns.store(now + kActiveHoldNs, kRlx);
    d->entry->inflight_until_ns.store(now + kInflightHoldNs, kRlx);
    d->entry->launches.fetch_add(1, kRlx);
    if (m != nullptr) m->CountLaunch();
    return {};  // the marker is left to the gate thread
  }
  d->entry->launches.fetch_add(1, kRlx);
  for (int64_t now = NowNs();; now = NowNs()) {
    d->entry->active_until_ns.store(now + kActiveHoldNs, kRlx);
    const int64_t wait = WaitBeforeLaunch(*d, now);
    if (wait > 0) {
      // Still contending while asleep (a late wake-up must not read as "stopped contending":
      // peers taking turns would hand the turn back and forth).
      const int64_t nap = wait < kMaxNapNs ? wait : kMaxNapNs;
      d->entry->active_until_ns.store(now + nap + kActiveHoldNs, kRlx);
      ++t_gate_waits;
      SleepNs(nap);
      continue;
    }
    if (DepthBounded(*d)) {
      const int64_t depth = DepthNs(*d, now);
      if (!DepthAllows(Outstanding(*d), d->meter.mean_launch_ns.load(kRlx), depth)) {
        PollDevice(*d, now);
        // A short queue (opportunistic work near guaranteed work) drains in about the time a
        // coarse sleep takes (up to 70 us with Linux's default timer slack): wait precisely
        // there. A 2 ms queue does not, and the coarse sleep wakes the thread less often.
        if (!DepthAllows(Outstanding(*d), d->meter.mean_launch_ns.load(kRlx), depth)) {
          ++t_gate_waits;
          (depth < kCapDepthNs ? SleepPreciseNs : SleepNs)(kQueuePollNs);
        }
        continue;
      }
    }
    break;
  }
  if (m == nullptr) return {};
  const int64_t spacing = MarkerSpacing(*d);  // the meter reads the clock only for spacing
  const int64_t busy = m->BeforeLaunch(g_gate->api, d->meter.pool, spacing > 0 ? NowNs() : 0, spacing);
  const int64_t now = NowNs();
  Charge(*d, busy, now);
  d->entry->inflight_until_ns.store(now + kInflightHoldNs, kRlx);
  // Eager markers where queued-ahead work is bounded, and on per-thread default streams
  // (only the owning thread can record on those).
  return {d, m, DepthBounded(*d) || own_thread_stream, spacing};
}

void AfterLaunch(const LaunchTicket& ticket) {
  if (ticket.meter == nullptr) return;
  ticket.meter->AfterLaunch(g_gate->api, ticket.device->meter.pool, ticket.eager, NowNs(), ticket.marker_spacing_ns);
}

void ForgetContext(CUcontext ctx) {
  if (ctx == nullptr) return;
  g_context_epoch.fetch_add(1, std::memory_order_acq_rel);
  if (g_gate == nullptr) return;
  Device* gone[kMaxContexts];
  int count = 0;
  {
    std::lock_guard<std::mutex> lock(g_gate->devices_mu);
    const int n = g_gate->device_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      Device& d = g_gate->devices[i];
      if (d.ctx.load(std::memory_order_acquire) != ctx) continue;
      d.ctx.store(nullptr, std::memory_order_seq_cst);  // the next launch in a context binds it again
      gone[count++] = &d;
    }
  }
  if (count == 0) return;
  // A pass that read the context before it was unbound may still be polling it (seq_cst
  // like exit's handshake: the pass raises g_in_pass before it reads the binding).
  const uint64_t pass = g_passes.load(std::memory_order_seq_cst);
  for (int i = 0; i < kExitWaitSteps && g_in_pass.load(std::memory_order_seq_cst) &&
                  g_passes.load(std::memory_order_seq_cst) == pass;
       ++i) {
    SleepNs(kExitWaitStepNs);
  }
  for (int k = 0; k < count; ++k) {
    Device& d = *gone[k];
    std::lock_guard<std::mutex> lock(d.meter.poll_mu);  // and out of any launching thread's poll
    const int n = d.meter.stream_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) d.meter.streams[i].load(std::memory_order_acquire)->Forget();
    d.meter.pool.Forget();
  }
}

uint64_t MeasuredBusyNsAllDevices() {
  if (g_gate == nullptr) return 0;
  uint64_t sum = 0;
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) sum += static_cast<uint64_t>(g_gate->devices[i].meter.busy_total.load(kRlx));
  return sum;
}

uint32_t WaitsOfThisThread() { return t_gate_waits; }

uint64_t MeasuredBusyNs() {
  if (g_gate == nullptr) return 0;
  Device* d = CurrentDevice();
  if (d == nullptr) return 0;
  PollDevice(*d, NowNs());
  return static_cast<uint64_t>(d->meter.busy_total.load(kRlx));
}

}  // namespace gslice::compute
