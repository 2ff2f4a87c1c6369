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

#include "gpu_meter.h"
#include "gslice/ledger.h"
#include "gslice/options.h"
#include "policy.h"

namespace gslice::compute {

std::atomic<int> g_gate_mode{0};
std::atomic<uint64_t> g_context_epoch{0};

namespace {

constexpr auto kRlx = std::memory_order_relaxed;
constexpr int kMaxContexts = 16;
constexpr int kMaxStreams = 256;
// Peers on one GPU a gate follows (compute entries of any slice on the same GPU).
constexpr int kMaxPeers = 48;
constexpr int64_t kPollGateNs = 200'000;
constexpr int64_t kPollWatchNs = 10'000'000;
constexpr int64_t kPeerScanNs = 10'000'000;

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

}  // namespace

// One context (one GPU) of this process (declared in launch_gate.h for LaunchTicket).
struct Device {
  std::atomic<CUcontext> ctx{nullptr};  // bound at the first gated launch in a context
  uint8_t uuid[16] = {};
  // The GPU is shared through MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED): processes' kernels run
  // concurrently, not in turns (policy.h, kSpatialTuning).
  bool spatial = false;
  LedgerComputeEntry* entry = nullptr;  // this process's entry in the ledger (or local)
  LedgerComputeEntry local_entry{};      // used when the ledger has no room
  EventPool pool;
  std::mutex streams_mu;
  // Allocated on first use (each holds a marker ring): a process pays for the streams it
  // launches on, not for the table.
  std::atomic<StreamMeter*> streams[kMaxStreams] = {};
  std::atomic<int> stream_count{0};

  std::atomic<int64_t> cap_tat{0};
  // The cap's state: the slice's shared word for this GPU in the ledger once found (every
  // process of the slice charges it, so the cap holds for the slice), else cap_tat.
  std::atomic<std::atomic<int64_t>*> slice_cap_tat{nullptr};
  std::atomic<int64_t> busy_total{0};
  std::atomic<int64_t> mean_launch_ns{20'000};
  std::mutex poll_mu;
  uint64_t last_done = 0;  // launches completed at the previous poll (poll_mu)

  // Peers: other alive entries on this GPU, refreshed by the gate thread.
  std::atomic<int> peer_count{0};
  int peers[kMaxPeers] = {};  // node-wide compute entry indices (ComputeWindow)
  std::atomic<int> opportunistic_peers{0};  // how many (the gate's mode, OverlapSpeed)
  std::atomic<int> guaranteed_peers{0};     // how many (NothingToYieldTo)
  std::atomic<bool> share_peer{false};
  // Opportunistic rate controller (TGS-style): while guaranteed work on this GPU is busy,
  // opportunistic work may use opp_rate_permille of the GPU's time (GCRA on opp_tat). The
  // gate thread adapts the rate so each guaranteed job's speed while busy stays
  // >= kGuaranteedFloor of what it is with opportunistic work paused (probed every
  // kProbeEveryNs).
  std::atomic<int64_t> opp_tat{0};
  std::atomic<uint32_t> opp_rate_permille{0};
  // While the rate is 0: opportunistic work enters only gaps after guaranteed work has
  // been idle this long (the controller's gap level, policy.h).
  std::atomic<int64_t> opp_gap_ns{0};
  // Set while the controller measures the baseline: opportunistic work then also stays
  // out of the guaranteed job's short gaps, so the baseline is the job's speed alone.
  std::atomic<bool> probe_pause{false};
  // Opportunistic work on a time-sliced GPU near guaranteed work (DepthNs): its queue is
  // kept short and every launch is marked. Written by the launching threads and the gate
  // thread's passes when it changes.
  std::atomic<bool> opp_near{false};
  struct Controller {
    int64_t next_ns = 0;
    int64_t last_probe_ns = 0;
    int64_t last_sample_ns = 0;
    // The controller has set its starting level since guaranteed work became busy: after
    // the first probe, or at once where the judgement needs no baseline (by_overlap).
    bool started = false;
    bool probing = false;
    uint32_t probe_left = 0;  // periods of the probe still to measure
    uint32_t saved_rate = 0;
    int64_t saved_gap = 0;
    uint32_t held = 0;  // OpportunisticLevel::held, hold
    uint32_t hold = 0;
    bool busy_seen = false;
    // MPS (policy.h, LossEstimate): the loss per exposure from paired probes; the periods of
    // the pair after the probe under way still to pool; the newest periods kept for the next
    // pair and for a cut between probes (recent_count of them, the next in recent_slot);
    // whether the last probe's pair gave the estimate its newest sample.
    LossEstimate loss;
    bool pair_sampled = false;
    uint32_t pair_left = 0;
    uint32_t recent_count = 0;
    uint32_t recent_slot = 0;
    // One guaranteed peer, by its index in the ledger's compute table (policy.h:
    // OverlapSpeed, GuaranteedSpeed).
    struct Job {
      int index = -1;              // the peer's compute entry (ComputeWindow index); -1: unused
      uint64_t owner = 0;          // the entry's state word this record belongs to
      uint64_t last_launches = 0;  // its launch count at the last period's end
      int64_t busy_ns = 0;         // time with work queued this period, sampled every pass
      uint64_t probe_launches = 0; // launches and busy time over the probe under way
      int64_t probe_busy_ns = 0;
      double base_per_ns = 0;      // launches per busy ns, opportunistic work paused (0: unknown)
      int64_t overlap_ns = 0;      // busy time this period in which this process had work queued
      // MPS: the newest periods (launches, busy, overlap) and the pair's sum over the periods
      // around the probe.
      GuaranteedPeriod recent[kPairPeriods];
      GuaranteedPeriod pair;
    } jobs[kMaxPeers];
  } ctl;
  bool running = false;     // holds the share turn (launching threads, under turn_mu)
  bool was_active = false;  // contended at the previous launch
  int64_t take_since = 0;   // the turn is ours since then, once the last runner drains
  std::mutex turn_mu;
};

namespace {

struct Gate {
  DriverApi api;
  ComputePolicy policy;
  // Every slice's compute entries as one table (mapped by InitOnce, never unmapped): this
  // process's slice's page writable, the others' read-only. nullptr: no ledger.
  ComputeWindow* window = nullptr;
  Ledger* mapping = nullptr;  // this process's slice: the entries' liveness lock bytes
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

// ---- ledger compute table -----------------------------------------------------------

LedgerComputeEntry* ClaimEntry(const uint8_t uuid[16], const ComputePolicy& p) {
  ComputeWindow* w = g_gate->window;
  if (w == nullptr || w->own_slice() < 0) return nullptr;
  const uint32_t pid = static_cast<uint32_t>(getpid());
  const int first = w->own_slice() * kLedgerSliceComputeEntries;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = first; i < first + kLedgerSliceComputeEntries; ++i) {
      LedgerComputeEntry& e = w->entry(i);
      uint64_t s = e.state.load(std::memory_order_acquire);
      if (StateOf(s) != EntryState::kFree) {
        // Second pass: free entries whose owner died.
        if (pass == 1 && StateOf(s) == EntryState::kAlive && !w->OwnerAlive(i)) {
          e.state.compare_exchange_strong(s, PackState(EntryState::kFree, 0));
          s = e.state.load(std::memory_order_acquire);
        }
        if (StateOf(s) != EntryState::kFree) continue;
      }
      if (!e.state.compare_exchange_strong(s, PackState(EntryState::kClaiming, pid))) continue;
      if (!g_gate->mapping->AcquireComputeEntry(i)) {  // its lock byte is still held elsewhere
        e.state.store(PackState(EntryState::kFree, 0), std::memory_order_release);
        continue;
      }
      memcpy(e.uuid, uuid, 16);
      e.slice_class.store(static_cast<uint32_t>(p.cls), kRlx);
      e.share_permille.store(p.share_permille | (p.share_set ? kComputeShareSet : 0u), kRlx);
      e.active_until_ns.store(0, kRlx);
      e.inflight_until_ns.store(0, kRlx);
      e.vtime_ns.store(0, kRlx);
      e.launches.store(0, kRlx);
      e.cap_slice.store(0, kRlx);
      e.state.store(PackState(EntryState::kAlive, pid), std::memory_order_release);
      return &e;
    }
  }
  return nullptr;
}

// Exit: the gate thread must make no more driver calls once exit handlers run (the driver's
// own teardown may free the events and streams it would touch). ReleaseEntries, an atexit
// handler registered after the driver loaded, runs before the driver's destructors: it
// stops the thread and waits for a pass in progress to end (Dekker-style: the thread
// raises g_in_pass before it looks at g_stop, exit raises g_stop before it looks at
// g_in_pass; both seq_cst, so one of them always sees the other).
std::atomic<bool> g_stop{false};
std::atomic<bool> g_in_pass{false};
std::atomic<uint64_t> g_passes{0};  // gate-thread passes ended

void ReleaseEntries() {
  g_stop.store(true, std::memory_order_seq_cst);
  g_gate_mode.store(static_cast<int>(GateMode::kOff), kRlx);
  for (int i = 0; i < 2000 && g_in_pass.load(std::memory_order_seq_cst); ++i) SleepNs(10'000);  // <= 20 ms
  if (g_gate == nullptr || g_gate->window == nullptr) return;
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    LedgerComputeEntry* e = g_gate->devices[i].entry;
    if (e != nullptr && e != &g_gate->devices[i].local_entry) {
      e->inflight_until_ns.store(0, kRlx);
      e->active_until_ns.store(0, kRlx);
      g_gate->mapping->ReleaseComputeEntry(g_gate->window->index_of(e));
      e->state.store(PackState(EntryState::kFree, 0), std::memory_order_release);
    }
  }
}

// d's index in the ledger's compute table; -1 when it has a local entry.
int EntryIndex(const Device& d) {
  if (g_gate->window == nullptr || d.entry == &d.local_entry) return -1;
  return g_gate->window->index_of(d.entry);
}

// 1 + the slice whose cap compute entry i charges; 0: none.
uint32_t CapSliceOf(int i) { return i < 0 ? 0 : g_gate->window->entry(i).cap_slice.load(kRlx); }

// Finds the slice's shared cap word for d's GPU (gate thread, with the peer scan): the slice
// and its GPU entry appear in the ledger once the memory side has attached and seen the GPU.
// The entry then names the slice, so that the slice's other processes on this GPU take
// exclusive turns with it (ScanPeers).
void ResolveSliceCap(Device& d) {
  if (!g_gate->policy.capped() || g_gate->window == nullptr || d.slice_cap_tat.load(kRlx) != nullptr) return;
  const char* name = OptionValue(Option::Slice);
  if (name == nullptr || name[0] == '\0') return;
  const int slice = g_gate->window->own_slice();
  if (slice < 0) return;
  const int gpu = g_gate->mapping->FindGpu(slice, d.uuid);
  if (gpu < 0) return;
  d.slice_cap_tat.store(&g_gate->window->own_head()->cap_tat[gpu], std::memory_order_release);
  const int mine = EntryIndex(d);
  if (mine >= 0) d.entry->cap_slice.store(static_cast<uint32_t>(slice) + 1, kRlx);
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
  ResolveSliceCap(d);
  ComputeWindow& w = *g_gate->window;
  int n = 0;
  bool share = false;
  int opp = 0;
  int guaranteed = 0;
  const bool mine_set = g_gate->policy.share_set;
  const uint32_t my_slice = CapSliceOf(EntryIndex(d));
  for (int i = 0; i < kLedgerMaxComputeEntries && n < kMaxPeers; ++i) {
    if (!w.mapped(ComputeSliceOf(i))) {
      i += kLedgerSliceComputeEntries - 1 - ComputeEntryOf(i);  // the next slice's first entry
      continue;
    }
    LedgerComputeEntry& e = w.entry(i);
    if (&e == d.entry) continue;
    uint64_t s = e.state.load(std::memory_order_acquire);
    if (StateOf(s) != EntryState::kAlive || memcmp(e.uuid, d.uuid, 16) != 0) continue;
    if (!w.OwnerAlive(i)) {
      // Only our own slice's entries are ours to free; another slice's dead entry is freed by
      // that slice (or gsliced) and meanwhile only expires.
      if (w.writable(i)) e.state.compare_exchange_strong(s, PackState(EntryState::kFree, 0));
      continue;
    }
    const auto cls = static_cast<ComputeClass>(e.slice_class.load(kRlx));
    if (cls == ComputeClass::kOpportunistic) ++opp;
    if (cls == ComputeClass::kGuaranteed) ++guaranteed;
    if (cls == g_gate->policy.cls && (mine_set || (e.share_permille.load(kRlx) & kComputeShareSet) != 0)) share = true;
    if (my_slice != 0 && CapSliceOf(i) == my_slice) share = true;
    d.peers[n++] = i;
  }
  d.peer_count.store(n, std::memory_order_release);
  d.opportunistic_peers.store(opp, kRlx);
  d.guaranteed_peers.store(guaranteed, kRlx);
  d.share_peer.store(share, kRlx);
  const bool published = (d.entry->share_permille.load(kRlx) & kComputeTakesTurns) != 0;
  if (share && !published) d.entry->share_permille.fetch_or(kComputeTakesTurns, kRlx);
  if (!share && published) d.entry->share_permille.fetch_and(~kComputeTakesTurns, kRlx);
}

GateMode WantedMode() {
  const ComputePolicy& p = g_gate->policy;
  if (p.capped() || p.cls == ComputeClass::kOpportunistic) return GateMode::kGate;
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    const Device& d = g_gate->devices[i];
    if (d.opportunistic_peers.load(kRlx) > 0 || d.share_peer.load(kRlx)) return GateMode::kGate;
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
  d.busy_total.fetch_add(busy, kRlx);
  d.entry->vtime_ns.fetch_add(VtimeIncrement(busy, g_gate->policy.share_permille), kRlx);
  if (g_gate->policy.capped()) GcraCharge(CapTat(d), now, busy, g_gate->policy.cap_permille);
  const uint32_t opp_rate = d.opp_rate_permille.load(kRlx);
  if (opp_rate > 0 && opp_rate < 1000) GcraCharge(d.opp_tat, now, busy, opp_rate);  // 1000: no limit
}

uint64_t Outstanding(Device& d) {
  uint64_t n = 0;
  const int count = d.stream_count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) n += d.streams[i].load(std::memory_order_acquire)->outstanding();
  return n;
}

// Consumes completed markers of every stream of d; the gate thread calls it every poll,
// waiting launchers call it to see their queue shrink.
void PollDevice(Device& d, int64_t now) {
  std::lock_guard<std::mutex> lock(d.poll_mu);
  const int count = d.stream_count.load(std::memory_order_acquire);
  int64_t busy = 0;
  uint64_t launches = 0, outstanding = 0;
  for (int i = 0; i < count; ++i) {
    StreamMeter* m = d.streams[i].load(std::memory_order_acquire);
    busy += m->Poll(g_gate->api, d.pool, now);
    launches += m->launches();
    outstanding += m->outstanding();
  }
  Charge(d, busy, now);
  const uint64_t done = launches - outstanding;
  if (busy > 0 && done > d.last_done) {
    const int64_t sample = busy / static_cast<int64_t>(done - d.last_done);
    const int64_t mean = d.mean_launch_ns.load(kRlx);
    d.mean_launch_ns.store(mean + (sample - mean) / 8, kRlx);
  }
  d.last_done = done;
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
  if (d.spatial && g_gate->policy.cls == ComputeClass::kOpportunistic) {
    LogLine("compute: the GPU is shared through MPS; opportunistic work runs beside guaranteed work at low priority");
  }
  d.ctx.store(ctx, std::memory_order_release);
  d.entry = ClaimEntry(d.uuid, g_gate->policy);
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
  std::lock_guard<std::mutex> lock(d.streams_mu);
  const int n = d.stream_count.load(std::memory_order_acquire);
  StreamMeter* found = nullptr;
  for (int i = 0; i < n; ++i) {
    StreamMeter* m = d.streams[i].load(std::memory_order_acquire);
    if (m->stream() == stream && m->thread_key() == thread_key) {
      found = m;
      break;
    }
  }
  if (found == nullptr) {
    if (n == kMaxStreams) return nullptr;  // unmetered beyond this many streams
    found = new (std::nothrow) StreamMeter;
    if (found == nullptr) return nullptr;
    d.streams[n].store(found, std::memory_order_release);
    found->Reset(stream, thread_key, /*lazy_markers=*/stream != CU_STREAM_PER_THREAD);
    d.stream_count.store(n + 1, std::memory_order_release);
  }
  cached_dev = &d;
  cached_stream = stream;
  cached = found;
  return found;
}

// ---- decisions ---------------------------------------------------------------------

bool GuaranteedBusy(Device& d, int64_t now) {
  if (g_gate->window == nullptr) return false;
  const int n = d.peer_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    LedgerComputeEntry& e = g_gate->window->entry(d.peers[i]);
    if (static_cast<ComputeClass>(e.slice_class.load(kRlx)) != ComputeClass::kGuaranteed) continue;
    if (e.inflight_until_ns.load(kRlx) > now || e.active_until_ns.load(kRlx) > now) return true;
  }
  return false;
}

// The guaranteed peers of d, for the controller: calls f(index, entry) for each.
template <typename F>
void ForEachGuaranteed(Device& d, F f) {
  if (g_gate->window == nullptr) return;
  const int n = d.peer_count.load(std::memory_order_acquire);
  for (int k = 0; k < n; ++k) {
    const int i = d.peers[k];
    LedgerComputeEntry& e = g_gate->window->entry(i);
    if (static_cast<ComputeClass>(e.slice_class.load(kRlx)) == ComputeClass::kGuaranteed) f(i, e);
  }
}

// The controller's record of the peer in compute entry i (gate thread): found by index, else
// a record no current peer uses, reset (its owner word no longer matches, so callers treat it
// as a new process).
Device::Controller::Job& JobOf(Device& d, int i) {
  Device::Controller& c = d.ctl;
  for (Device::Controller::Job& j : c.jobs) {
    if (j.index == i) return j;
  }
  const int n = d.peer_count.load(std::memory_order_acquire);
  for (Device::Controller::Job& j : c.jobs) {
    bool in_use = false;
    for (int k = 0; k < n && j.index >= 0 && !in_use; ++k) in_use = d.peers[k] == j.index;
    if (!in_use) {
      j = {};
      j.index = i;
      return j;
    }
  }
  return c.jobs[0];  // unreachable: there are as many records as peers
}

// Every gate-thread pass: the time since the last pass counts as busy for each guaranteed
// peer with work queued, and as overlap where this process had work queued too (both read
// as inflight_until_ns, which PollDevice has just published for this process). A pass late
// by more than kMaxSampleNs counts only that much (the state in between is unknown).
// Returns GuaranteedBusy(d, now).
constexpr int64_t kMaxSampleNs = 5'000'000;
bool SampleGuaranteed(Device& d, int64_t now) {
  Device::Controller& c = d.ctl;
  int64_t dt = c.last_sample_ns == 0 ? 0 : now - c.last_sample_ns;
  if (dt > kMaxSampleNs) dt = kMaxSampleNs;
  c.last_sample_ns = now;
  bool busy = false;
  const bool mine = d.entry->inflight_until_ns.load(kRlx) > now;
  ForEachGuaranteed(d, [&](int i, LedgerComputeEntry& e) {
    Device::Controller::Job& j = JobOf(d, i);
    const uint64_t owner = e.state.load(kRlx);
    if (j.owner != owner) {  // a new process in this entry: a fresh record
      j = {};
      j.index = i;
      j.owner = owner;
      j.last_launches = e.launches.load(kRlx);
    }
    const bool queued = e.inflight_until_ns.load(kRlx) > now;
    if (queued) j.busy_ns += dt;
    if (queued && mine) j.overlap_ns += dt;
    busy |= queued || e.active_until_ns.load(kRlx) > now;
  });
  return busy;
}

// Ends a control period: each guaranteed peer's launches and busy time in it, into out. Outside
// a probe the period also goes into the peer's newest periods and, while a pair is being
// pooled after a probe, into the pair.
int CloseGuaranteedPeriod(Device& d, GuaranteedPeriod* out) {
  Device::Controller& c = d.ctl;
  int n = 0;
  ForEachGuaranteed(d, [&](int i, LedgerComputeEntry& e) {
    Device::Controller::Job& j = JobOf(d, i);
    if (j.owner != e.state.load(kRlx)) return;  // not sampled yet
    const uint64_t now_launches = e.launches.load(kRlx);
    const uint64_t launches = now_launches >= j.last_launches ? now_launches - j.last_launches : now_launches;
    j.last_launches = now_launches;
    out[n++] = {launches, j.busy_ns, j.base_per_ns, j.overlap_ns};
    if (c.probing) {
      j.probe_launches += launches;
      j.probe_busy_ns += j.busy_ns;
    } else {
      j.recent[c.recent_slot] = {launches, j.busy_ns, 0, j.overlap_ns};
      if (c.pair_left > 0) AddPeriod(&j.pair, j.recent[c.recent_slot]);
    }
    j.busy_ns = 0;
    j.overlap_ns = 0;
  });
  if (!c.probing) {
    c.recent_slot = (c.recent_slot + 1) % kPairPeriods;
    if (c.recent_count < kPairPeriods) ++c.recent_count;
  }
  return n;
}

// Ends a probe: each guaranteed peer busy long enough during it gets its speed alone as its
// baseline. Returns how many did; *first: one of them had none before.
int EndProbe(Device& d, bool* first) {
  int measured = 0;
  *first = false;
  for (Device::Controller::Job& j : d.ctl.jobs) {
    if (j.probe_busy_ns >= kMinJudgedBusyNs) {
      *first |= j.base_per_ns == 0;
      j.base_per_ns = static_cast<double>(j.probe_launches) / static_cast<double>(j.probe_busy_ns);
      ++measured;
    }
    j.probe_launches = 0;
    j.probe_busy_ns = 0;
  }
  return measured;
}

// A guaranteed peer's k-th newest period (1: the newest; k <= recent_count).
const GuaranteedPeriod& NewestPeriod(const Device::Controller& c, const Device::Controller::Job& j, uint32_t k) {
  return j.recent[(c.recent_slot + kPairPeriods - k) % kPairPeriods];
}

// The guaranteed peers' periods against their current baselines, into out: the pair pooled
// (pair), else the k-th newest period (1: the newest; k <= recent_count). Returns how many.
int PeerPeriods(Device& d, bool pair, uint32_t k, GuaranteedPeriod* out) {
  Device::Controller& c = d.ctl;
  int n = 0;
  ForEachGuaranteed(d, [&](int i, LedgerComputeEntry& e) {
    Device::Controller::Job& j = JobOf(d, i);
    if (j.owner != e.state.load(kRlx)) return;
    GuaranteedPeriod p = pair ? j.pair : NewestPeriod(c, j, k);
    p.base_per_ns = j.base_per_ns;
    out[n++] = p;
  });
  return n;
}

// MPS: the last probe's baselines are stale (PairSaysBaselineStale): the next period probes
// again, and until its pair the rate is at most what the estimate allows (the full rate if
// it is empty). Returns that rate.
uint32_t ProbeAgain(Device& d, int64_t now, uint32_t rate, int peers, const ControllerTuning& tuning) {
  Device::Controller& c = d.ctl;
  rate = std::min(rate, EstimateRate(c.loss, peers));
  d.opp_rate_permille.store(rate, kRlx);
  c.pair_sampled = false;
  c.recent_count = 0;
  c.last_probe_ns = now - tuning.probe_every_ns;
  return rate;
}

// MPS: a pair is complete; its sample goes into the estimate, which sets the rate
// (policy.h, LossEstimate; a pair under kMinExposure goes into its pool). A pair that says
// the probe's baselines are wrong is dropped (ProbeAgain).
void EndPair(Device& d, int64_t now, uint32_t rate, int peers, const ControllerTuning& tuning) {
  Device::Controller& c = d.ctl;
  GuaranteedPeriod jobs[kMaxPeers];
  const int n = PeerPeriods(d, /*pair=*/true, 0, jobs);
  const double speed = SpatialSpeed(jobs, n, peers);
  const double exposure = Exposure(PeriodTotal(jobs, n, /*judged_only=*/true), peers);
  if (PairSaysBaselineStale(speed)) {
    const uint32_t held = ProbeAgain(d, now, rate, peers, tuning);
    TraceLine("compute: controller: pair: guaranteed speed %.3f at exposure %.2f: the probe's baseline is stale; "
              "probing again; rate %u permille", speed, exposure, held);
    return;
  }
  const bool sampled = speed >= 0 && c.loss.Add(1 - speed, exposure);
  c.pair_sampled = sampled;
  const uint32_t next = NextSpatialRate(rate, c.loss, sampled, peers);
  d.opp_rate_permille.store(next, kRlx);
  c.recent_count = 0;  // periods at the old rate say nothing of the new one
  TraceLine("compute: controller: pair: guaranteed speed %.3f at exposure %.2f (%s, %d pooled); loss per exposure %.3f over %d; rate %u permille",
        speed, exposure, sampled ? "sampled" : "not sampled", c.loss.pooled(), c.loss.PerExposure(), c.loss.count(), next);
}

// MPS, between probes: only a loss the noise cannot explain cuts the rate, and brings the
// next probe forward so that its pair measures the new cost. That is kPairPeriods periods in
// a row, each below kSpatialCutBelow: a host's stall slows the guaranteed job as much, but
// seldom for half a second. kPairPeriods periods in a row each above kStaleBaselineAbove say
// the last probe's baseline is wrong: its pair's sample is dropped and the next period
// probes again.
void CheckSpatialCut(Device& d, int64_t now, uint32_t rate, int peers, const ControllerTuning& tuning) {
  Device::Controller& c = d.ctl;
  if (c.recent_count < kPairPeriods) return;
  double fastest = 0, slowest = 0;
  for (uint32_t k = 1; k <= kPairPeriods; ++k) {
    GuaranteedPeriod jobs[kMaxPeers];
    const double speed = SpatialSpeed(jobs, PeerPeriods(d, /*pair=*/false, k, jobs), peers);
    if (speed < 0) return;
    fastest = speed > fastest ? speed : fastest;
    slowest = k == 1 || speed < slowest ? speed : slowest;
  }
  if (PairSaysBaselineStale(slowest)) {
    if (c.pair_sampled) c.loss.DropNewest();
    const uint32_t held = ProbeAgain(d, now, rate, peers, tuning);
    TraceLine("compute: controller: guaranteed speed at least %.3f in %u periods: the probe's baseline is stale; "
              "probing again; loss per exposure %.3f over %d; rate %u permille",
              slowest, kPairPeriods, c.loss.PerExposure(), c.loss.count(), held);
    return;
  }
  if (fastest >= kSpatialCutBelow) return;
  const uint32_t next = SpatialCut(rate);
  d.opp_rate_permille.store(next, kRlx);
  c.recent_count = 0;
  const int64_t soon = now + tuning.reprobe_after_cut_ns - tuning.probe_every_ns;
  if (soon > c.last_probe_ns) c.last_probe_ns = soon;
  TraceLine("compute: controller: cut: guaranteed speed at most %.3f in %u periods; rate %u permille", fastest, kPairPeriods, next);
}

// The opportunistic rate controller, run by the gate thread every pass. Time-sliced: additive
// increase while the guaranteed jobs' overlap bound holds, multiplicative decrease when it
// does not (NextOpportunisticLevel). MPS: a periodic probe with opportunistic work paused
// learns each job's speed alone as it changes, and the periods around it tell what the
// opportunistic work costs (LossEstimate, NextSpatialRate, SpatialCut).
void ControlOpportunisticRate(Device& d, int64_t now) {
  Device::Controller& c = d.ctl;
  if (SampleGuaranteed(d, now)) c.busy_seen = true;
  if (now < c.next_ns) return;
  c.next_ns = now + kControlPeriodNs;
  GuaranteedPeriod jobs[kMaxPeers];
  const int n = CloseGuaranteedPeriod(d, jobs);
  uint32_t r = d.opp_rate_permille.load(kRlx);
  if (!c.busy_seen) {
    // No guaranteed work: nothing to protect (the gate lets opportunistic work run freely),
    // and time used meanwhile is not held against the rate once guaranteed work returns.
    // When it does, a probe measures the jobs' speed alone first; what the opportunistic
    // work costs them (MPS) is kept: a job that paused (an evaluation, a checkpoint, a
    // server between requests) is hurt as before, and a job seen for the first time clears
    // it (EndProbe).
    c.probing = false;
    d.probe_pause.store(false, kRlx);
    c.started = false;
    c.held = 0;
    c.hold = 0;
    c.pair_left = 0;
    c.recent_count = 0;
    d.opp_tat.store(0, kRlx);
    d.opp_gap_ns.store(0, kRlx);
    return;
  }
  c.busy_seen = false;
  const ControllerTuning& tuning = d.spatial ? kSpatialTuning : kTimeSlicedTuning;
  const int peers = d.opportunistic_peers.load(kRlx);
  if (tuning.by_overlap && !c.started) {
    c.started = true;
    c.held = 0;
    c.hold = tuning.hold_periods;
    d.opp_rate_permille.store(tuning.start_permille, kRlx);
    d.opp_gap_ns.store(tuning.start_gap_ns, kRlx);
    TraceLine("compute: controller: guaranteed work busy; rate %u permille, gap %lld us", tuning.start_permille,
          static_cast<long long>(tuning.start_gap_ns / 1000));
    return;
  }
  if (c.probing) {
    if (--c.probe_left > 0) return;
    bool first = false;
    const int measured = EndProbe(d, &first);
    // A job measured for the first time may be hurt more or less than those the samples
    // came from: the estimate starts again.
    if (first) c.loss.Clear();
    TraceLine("compute: controller: probe measured %d guaranteed job(s) alone; back to rate %u permille, gap %lld us",
          measured, c.saved_rate, static_cast<long long>(c.saved_gap / 1000));
    c.started = true;
    c.probing = false;
    c.pair_left = kPairPeriods;
    d.probe_pause.store(false, kRlx);
    d.opp_rate_permille.store(c.saved_rate, kRlx);
    d.opp_gap_ns.store(c.saved_gap, kRlx);
    return;
  }
  if (c.pair_left > 0) {  // pooling the pair's second half: no other decision meanwhile
    if (--c.pair_left == 0) EndPair(d, now, r, peers, tuning);
    return;
  }
  // A job busy enough to judge but with no speed alone yet (it started, or was too idle at
  // the last probe) is measured soon, not at the next regular probe.
  bool unknown = false;
  for (int i = 0; i < n; ++i) unknown |= jobs[i].base_per_ns == 0 && jobs[i].busy_ns >= kMinJudgedBusyNs;
  if (!tuning.by_overlap &&
      (!c.started || now - c.last_probe_ns >= tuning.probe_every_ns || (unknown && now - c.last_probe_ns >= kUnknownJobProbeNs))) {
    // The pair's first half: the newest periods, at the rate the probe returns to.
    ForEachGuaranteed(d, [&](int i, LedgerComputeEntry& e) {
      Device::Controller::Job& j = JobOf(d, i);
      if (j.owner != e.state.load(kRlx)) return;
      j.pair = {};
      for (uint32_t k = 1; c.started && k <= c.recent_count; ++k) AddPeriod(&j.pair, NewestPeriod(c, j, k));
    });
    c.probing = true;
    c.probe_left = tuning.probe_periods;
    for (Device::Controller::Job& j : c.jobs) {
      j.probe_launches = 0;
      j.probe_busy_ns = 0;
    }
    c.last_probe_ns = now;
    // After a pause of the guaranteed work, the rate the kept estimate allows, if lower.
    c.saved_rate = c.started ? r : std::min(tuning.start_permille, EstimateRate(c.loss, peers));
    c.saved_gap = c.started ? d.opp_gap_ns.load(kRlx) : tuning.start_gap_ns;
    d.opp_rate_permille.store(0, kRlx);
    d.probe_pause.store(true, kRlx);
    return;
  }
  // Too little busy time in the period says nothing of the jobs' speed.
  const double speed = tuning.by_overlap ? OverlapSpeed(jobs, n, peers) : SpatialSpeed(jobs, n, peers);
  if (speed < 0) return;
  const GuaranteedPeriod total = PeriodTotal(jobs, n);
  if (!tuning.by_overlap) {
    TraceLine("compute: controller: guaranteed speed %.3f (busy %lld ms, overlap %lld us); rate %u permille",
          speed, static_cast<long long>(total.busy_ns / 1'000'000), static_cast<long long>(total.overlap_ns / 1000), r);
    CheckSpatialCut(d, now, r, peers, tuning);
    return;
  }
  const OpportunisticLevel next = NextOpportunisticLevel({r, d.opp_gap_ns.load(kRlx), c.held, c.hold}, speed, 1.0, tuning);
  c.held = next.held;
  c.hold = next.hold;
  d.opp_gap_ns.store(next.gap_ns, kRlx);
  d.opp_rate_permille.store(next.rate_permille, kRlx);
  TraceLine("compute: controller: guaranteed speed %.3f (busy %lld ms, overlap %lld us); rate %u permille, gap %lld us, next step after %u periods",
        speed, static_cast<long long>(total.busy_ns / 1'000'000), static_cast<long long>(total.overlap_ns / 1000),
        next.rate_permille, static_cast<long long>(next.gap_ns / 1000), next.hold < 1 ? 1 : next.hold);
}

constexpr uint32_t kRunningBit = kComputeShareRunning;

void SetRunning(Device& d, bool running) {
  if (d.running == running) return;
  d.running = running;
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
  if (g_gate->window == nullptr || !d.share_peer.load(kRlx)) return c;
  const int n = d.peer_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    LedgerComputeEntry& e = g_gate->window->entry(d.peers[i]);
    if (static_cast<ComputeClass>(e.slice_class.load(kRlx)) != g_gate->policy.cls) continue;
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

// How long to wait before launching on d now; 0: go.
int64_t WaitBeforeLaunch(Device& d, int64_t now) {
  const ComputePolicy& p = g_gate->policy;
  int64_t wait = 0;
  if (p.capped()) wait = GcraWaitNs(CapTat(d).load(kRlx), now);
  if (p.cls == ComputeClass::kOpportunistic && d.probe_pause.load(kRlx) && GuaranteedBusy(d, now - kProbeGapNs)) {
    wait = wait > 100'000 ? wait : 100'000;  // the controller is measuring guaranteed work alone
  } else if (p.cls == ComputeClass::kOpportunistic && GuaranteedBusy(d, now - d.opp_gap_ns.load(kRlx))) {
    // Guaranteed work is busy (or idle for less than the gap level): only the controller's
    // rate (0: none).
    const uint32_t r = d.opp_rate_permille.load(kRlx);
    const int64_t w = r == 0 ? 100'000 : r >= 1000 ? 0 : GcraWaitNs(d.opp_tat.load(kRlx), now);
    if (w > wait) wait = w;
  }
  if (wait > 0) return wait;
  const Contenders c = FindContenders(d, now);
  std::lock_guard<std::mutex> lock(d.turn_mu);
  if (c.min_vtime == INT64_MAX) {
    d.was_active = false;
    d.take_since = 0;
    SetRunning(d, false);
    return 0;
  }
  int64_t mine = d.entry->vtime_ns.load(kRlx);
  if (!d.was_active) {
    // Contention starts (for us): catch up to the others' virtual time.
    const int64_t caught = VtimeOnActivation(mine, c.min_vtime);
    if (caught != mine) d.entry->vtime_ns.fetch_add(caught - mine, kRlx);
    mine = caught;
    d.was_active = true;
  }
  if (!ShareTurn(mine, c.min_vtime, d.running, c.running)) {
    d.take_since = 0;
    SetRunning(d, false);
    return 200'000;
  }
  if (!d.running) {
    // Taking the turn: let the previous runner's queued work drain first, so that measured
    // intervals are ours alone (bounded from the moment the turn became ours: a stalled
    // peer cannot hold us).
    if (d.take_since == 0) d.take_since = now;
    if (c.inflight && now - d.take_since < kDrainWaitMaxNs) return 50'000;
    d.take_since = 0;
    SetRunning(d, true);
  }
  return 0;
}

bool DepthBounded(Device& d) {
  return g_gate->policy.capped() || g_gate->policy.cls == ComputeClass::kOpportunistic || d.running;
}

// Debug trace of DepthNs's changes: the queue bound, and until when each guaranteed peer
// last said it had work queued and wanted the GPU (ms from now; 0 = never or cleared).
void TraceNear(Device& d, bool near, int64_t now) {
  const auto from_now = [now](int64_t t) { return t == 0 ? 0.0 : static_cast<double>(t - now) / 1e6; };
  char line[256];
  int n = snprintf(line, sizeof line, "compute: opportunistic queue %s", near ? "short (guaranteed work near)" : "deep");
  ForEachGuaranteed(d, [&](int i, LedgerComputeEntry& e) {
    if (n < 0 || n >= static_cast<int>(sizeof line)) return;
    n += snprintf(line + n, sizeof line - n, "; entry %d inflight until %+.1f ms, active until %+.1f ms", i,
                  from_now(e.inflight_until_ns.load(kRlx)), from_now(e.active_until_ns.load(kRlx)));
  });
  g_trace(line);
}

// Opportunistic work on a time-sliced GPU keeps its queue short while guaranteed work is
// busy or was within kOpportunisticDeepAfterNs ("near"), so that guaranteed work waits little
// when it comes (back): what is queued then is what the next request of a server waits for.
// With the GPU to itself for longer, it queues as deep as capped work does: a launch-bound
// job alone ran at 0.85 of its speed with a 0.5 ms queue on an H100. Launches and every gate
// thread pass update it, so it is current also while the controller holds launches back.
int64_t DepthNs(Device& d, int64_t now) {
  if (g_gate->policy.cls != ComputeClass::kOpportunistic || d.spatial) return kCapDepthNs;
  const bool near = GuaranteedBusy(d, now - kOpportunisticDeepAfterNs);
  if (d.opp_near.load(kRlx) != near && d.opp_near.exchange(near, kRlx) != near && g_trace != nullptr) {
    TraceNear(d, near, now);
  }
  return near ? kOpportunisticDepthNs : kCapDepthNs;
}

// Opportunistic work with no cap and no share peer: only guaranteed peers constrain it.
bool OpportunisticOnly(const Device& d) {
  const ComputePolicy& p = g_gate->policy;
  return p.cls == ComputeClass::kOpportunistic && !p.capped() && !d.share_peer.load(kRlx);
}

// Opportunistic work with no cap and no share peer marks its streams (and checks them for
// a drain) at most every kOpportunisticMarkerNs: its time only feeds the controller's
// budget and its queue bound. With a marker and a drain check per launch, a launch-bound
// job whose stream drains between launches paid two event records and a query per launch.
// Near guaranteed work (DepthNs) it marks every launch: the short queue is then bounded by
// launches, not by 100 us stretches of them, and the controller's overlap ends when the last
// queued kernel does, not at the next marker.
int64_t MarkerSpacing(const Device& d) {
  return OpportunisticOnly(d) && !d.opp_near.load(kRlx) ? kOpportunisticMarkerNs : 0;
}

// An opportunistic process with no cap and no share peer, on a GPU where no guaranteed
// process runs, has nothing to yield to: its launches go straight through, unmeasured and
// with no queue bound, as with no class. On an H100 a launch-bound ResNet-50 training job
// alone ran at 0.81-0.85 of native through the gated path (queue bound, markers) and at
// 0.99 straight through. A guaranteed process that starts is seen within one peer scan
// (10 ms), long before its first kernel; only then is the queue bounded.
bool NothingToYieldTo(const Device& d) { return OpportunisticOnly(d) && d.guaranteed_peers.load(kRlx) == 0; }

// A guaranteed process with no cap and no share contention only publishes that it is
// busy: no waiting, no measurement, no driver call on the launch path.
bool PublishOnly(const Device& d) {
  const ComputePolicy& p = g_gate->policy;
  return p.cls == ComputeClass::kGuaranteed && !p.capped() && !d.share_peer.load(kRlx);
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
      if (g_gate->policy.cls == ComputeClass::kOpportunistic) {
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
                          &gate.policy, error, sizeof error)) {
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
  char note[640] = {};
  int slice = -1;
  if (OpenSliceLedger(mapping, path, OptionValue(Option::LedgerUsage), sliced ? slice_name : kLedgerUnslicedName,
                      SliceClass::kGuaranteed, flags, /*create_slice=*/true, &slice, note, sizeof note) == LedgerError::kOk &&
      window->Init(mapping, slice)) {
    gate.window = window;
    gate.mapping = mapping;
    window->Refresh();
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
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // The gate thread must not receive the application's signals.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int rc = pthread_create(&thread, &attr, GateThread, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
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
      const int64_t nap = wait < 1'000'000 ? wait : 1'000'000;
      d->entry->active_until_ns.store(now + nap + kActiveHoldNs, kRlx);
      SleepNs(nap);
      continue;
    }
    if (DepthBounded(*d)) {
      const int64_t depth = DepthNs(*d, now);
      if (!DepthAllows(Outstanding(*d), d->mean_launch_ns.load(kRlx), depth)) {
        PollDevice(*d, now);
        // A short queue (opportunistic work near guaranteed work) drains in about the time a
        // coarse sleep takes (up to 70 us with Linux's default timer slack): wait precisely
        // there. A 2 ms queue does not, and the coarse sleep wakes the thread less often.
        if (!DepthAllows(Outstanding(*d), d->mean_launch_ns.load(kRlx), depth)) {
          (depth < kCapDepthNs ? SleepPreciseNs : SleepNs)(20'000);
        }
        continue;
      }
    }
    break;
  }
  if (m == nullptr) return {};
  const int64_t spacing = MarkerSpacing(*d);  // the meter reads the clock only for spacing
  const int64_t busy = m->BeforeLaunch(g_gate->api, d->pool, spacing > 0 ? NowNs() : 0, spacing);
  const int64_t now = NowNs();
  Charge(*d, busy, now);
  d->entry->inflight_until_ns.store(now + kInflightHoldNs, kRlx);
  // Eager markers where queued-ahead work is bounded, and on per-thread default streams
  // (only the owning thread can record on those).
  return {d, m, DepthBounded(*d) || own_thread_stream, spacing};
}

void AfterLaunch(const LaunchTicket& ticket) {
  if (ticket.meter == nullptr) return;
  ticket.meter->AfterLaunch(g_gate->api, ticket.device->pool, ticket.eager, NowNs(), ticket.marker_spacing_ns);
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
  for (int i = 0; i < 2000 && g_in_pass.load(std::memory_order_seq_cst) &&
                  g_passes.load(std::memory_order_seq_cst) == pass;
       ++i) {
    SleepNs(10'000);
  }
  for (int k = 0; k < count; ++k) {
    Device& d = *gone[k];
    std::lock_guard<std::mutex> lock(d.poll_mu);  // and out of any launching thread's poll
    const int n = d.stream_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) d.streams[i].load(std::memory_order_acquire)->Forget();
    d.pool.Forget();
  }
}

uint64_t MeasuredBusyNs() {
  if (g_gate == nullptr) return 0;
  Device* d = CurrentDevice();
  if (d == nullptr) return 0;
  PollDevice(*d, NowNs());
  return static_cast<uint64_t>(d->busy_total.load(kRlx));
}

}  // namespace gslice::compute
