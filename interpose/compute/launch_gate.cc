// The launch gate's launch path: BeforeLaunch and AfterLaunch, what they look up (the
// context's Device, the stream's meter) and how they wait. Each launch samples what it needs
// (its policy, the peers' times in the ledger, its queue) and applies the rules of policy.h,
// the share turn (share_turn.h) and the controller's last decision. The gate thread
// (gate_thread.cc) keeps the peers, the policy and the decision current; gate_state.h states
// who writes what.
#include "launch_gate.h"

#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <mutex>
#include <new>

#include "gate_state.h"

namespace gslice::compute {

std::atomic<int> g_gate_mode{0};
std::atomic<uint64_t> g_context_epoch{0};
LaunchCount g_counted;

namespace {
// Launches of this thread until the next timed one (CountLaunch).
thread_local uint32_t t_until_timed = kKernelSampleEvery;
thread_local uint32_t t_gap_state = 0;  // NextTimedGap's generator (0: not seeded)

// The launches until this thread's next timed one: 1 to 2 every - 1, every on average. A fixed
// stride would time the same few kernels of a job whose step repeats one sequence of launches
// of a length it divides (a training step), and never the others.
uint32_t NextTimedGap(uint32_t every) {
  uint32_t x = t_gap_state;
  if (x == 0) x = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&t_gap_state) >> 4) | 1u;
  x ^= x << 13;  // xorshift32
  x ^= x >> 17;
  x ^= x << 5;
  t_gap_state = x;
  return every <= 1 ? 1 : 1 + x % (2 * every - 1);
}
}  // namespace

bool WaitsCounted() { return g_counted.count_waits.load(kRlx); }

void CountWait(int64_t ns) {
  g_counted.waits.fetch_add(1, kRlx);
  if (ns > 0) g_counted.waited_ns.fetch_add(ns, kRlx);
}

bool WaitsSayQueued() { return g_counted.waits_say_queued.load(kRlx); }
void WaitBegins() { g_counted.waiting.fetch_add(1, kRlx); }
void WaitEnds() { g_counted.waiting.fetch_sub(1, kRlx); }

bool CountLaunch() {
  g_counted.launches.store(g_counted.launches.load(kRlx) + 1, kRlx);
  if (--t_until_timed != 0 && !g_counted.time_next.load(kRlx)) return false;
  t_until_timed = NextTimedGap(g_counted.every.load(kRlx));
  return true;
}

namespace {

// How many polls' samples the mean launch cost averages over (an exponential mean).
constexpr int64_t kMeanLaunchPolls = 8;
// A launch waiting at the gate sleeps at most kMaxNapNs at a time (it stays "active" for its
// peers while asleep), and kQueuePollNs while its queue is over the depth bound.
constexpr int64_t kMaxNapNs = 1'000'000;
constexpr int64_t kQueuePollNs = 20'000;

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

// ---- measurement -------------------------------------------------------------------

std::atomic<int64_t>& CapTat(Device& d) {
  std::atomic<int64_t>* shared = d.slice_cap_tat.load(std::memory_order_acquire);
  return shared != nullptr ? *shared : d.cap_tat;
}

void Charge(Device& d, int64_t busy, int64_t now) {
  if (busy <= 0) return;
  d.meter.busy_total.fetch_add(busy, kRlx);
  // GPU time is busy time times the share of the SMs the kernels could use (Device::sm_permille).
  const uint32_t sm_permille = d.sm_permille.load(kRlx);
  if (sm_permille < 1000) busy = busy * sm_permille / 1000;
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

// ---- guaranteed peers --------------------------------------------------------------

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

// On a GPU shared through MPS, opportunistic work the controller does not throttle runs as
// plain MPS at priority 1 runs it: straight through, unmeasured, with no queue bound
// (mps_controller.h). Its launches only say it has work queued (kUngatedHoldNs).
bool UnthrottledOnMps(const Device& d) {
  return d.spatial && OpportunisticOnly(d) && d.opp.rate_permille.load(kRlx) >= 1000 && !d.opp.probe_pause.load(kRlx);
}

// An ungated launch's word to its peers: work queued for kUngatedHoldNs, on the coarse clock
// (a few ns; a tick behind, which the hold outlasts). The coarse clock moves every few ms, so
// most launches only read the entry's line: a store that changes nothing would take it from
// the readers. The gate thread says it too while a thread of the process waits on the GPU.
void SayWorkQueued(Device& d) {
  const int64_t until = MonotonicCoarseNs() + kUngatedHoldNs;
  if (d.entry->inflight_until_ns.load(kRlx) != until) {
    d.entry->inflight_until_ns.store(until, kRlx);
    d.opp.said_until.store(until, kRlx);
  }
}

// This thread launched unmetered (NothingToYieldTo, UnthrottledOnMps) on a GPU shared through
// MPS since its last metered launch: its stream may hold work no marker covers.
thread_local bool t_unmetered = false;

}  // namespace

// ---- also run by the gate thread (gate_state.h) -----------------------------------

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
  // A thread waiting on the GPU has work queued, metered or not (WaitsSayQueued).
  if (d.spatial && g_counted.waiting.load(kRlx) > 0) SayWorkQueued(d);
  // Publish whether queued work remains (CAS so a launch's fresher store is not lost). Work
  // launched unmetered (UnthrottledOnMps) said so itself, for kUngatedHoldNs, and that word
  // stands when launches are metered again: no marker covers that work.
  if (UnthrottledOnMps(d)) return;
  int64_t inflight = d.entry->inflight_until_ns.load(kRlx);
  const int64_t said = d.opp.said_until.load(kRlx);
  int64_t want = outstanding > 0 ? now + kInflightHoldNs : 0;
  if (said > now && said > want) want = said;
  if (outstanding > 0 || inflight != 0) d.entry->inflight_until_ns.compare_exchange_strong(inflight, want, kRlx);
}

void UpdateNear(Device& d, int64_t now) { DepthNs(d, now); }

namespace {

// ---- devices and streams -----------------------------------------------------------

Device* CurrentDevice(CUcontext ctx) {
  if (ctx == nullptr && (g_gate->api.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr)) return nullptr;
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

// ---- waiting -----------------------------------------------------------------------

// Publishes whether this process holds the share turn on d (kComputeShareRunning): peers do
// not take the turn while it does.
void PublishRunning(Device& d, bool running) {
  if (running) {
    d.entry->share_permille.fetch_or(kComputeShareRunning, kRlx);
  } else {
    d.entry->share_permille.fetch_and(~kComputeShareRunning, kRlx);
  }
}

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
    if ((e.share_permille.load(kRlx) & kComputeShareRunning) != 0) c.running = true;
  }
  return c;
}

// How long a launch held back by the opportunistic controller waits before it looks again:
// short against the gate thread's decisions, which may free it.
constexpr int64_t kHeldBackNs = 100'000;

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
  std::lock_guard<std::mutex> lock(d.turn_mu);
  const bool was_running = d.turn.running();
  const TurnDecision turn = d.turn.Decide(c, c.any() ? d.entry->vtime_ns.load(kRlx) : 0, now);
  if (turn.vtime_add != 0) d.entry->vtime_ns.fetch_add(turn.vtime_add, kRlx);
  if (turn.running != was_running) PublishRunning(d, turn.running);
  return turn.wait_ns;
}

// ---- which path a launch takes --------------------------------------------------------

// Queued-ahead work is bounded (DepthNs) and launches are marked eagerly.
bool DepthBounded(Device& d) {
  const ComputePolicy p = PolicyOf(d);
  return p.capped() || p.cls == ComputeClass::kOpportunistic || d.turn.running();
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

// Starts timing this launch where the gate samples this GPU's kernels (KernelTiming) and
// CountLaunch picks it: while counting (GateMode::kCount) it picked it already, in
// LaunchThroughGate; while gating it picks here. Returns whether it did (the ticket then
// carries the sample for AfterLaunch).
bool StartKernelSample(Device& d, CUstream stream, const KernelShape* shape, LaunchTicket* ticket) {
  if (shape == nullptr || !d.kernels.sampling.load(kRlx)) return false;
  if (g_gate_mode.load(kRlx) != static_cast<int>(GateMode::kCount) && !CountLaunch()) return false;
  if (g_counted.time_next.load(kRlx)) g_counted.time_next.store(false, kRlx);
  const int64_t launched = MonotonicNs();  // when it was launched, to the gate thread's precision
  CUevent start = d.meter.pool.Get(g_gate->api);
  if (start == nullptr) return false;
  if (g_gate->api.event_record(start, stream) != CUDA_SUCCESS) {
    d.meter.pool.Put(start);
    return false;
  }
  *ticket = {.device = &d, .sample = {.start = start, .key = KernelKey(*shape), .launched_ns = launched}, .stream = stream};
  return true;
}

// The end of a sampled launch: its end event, and the pair into the ring (dropped when full).
void FinishKernelSample(const LaunchTicket& t) {
  Device& d = *t.device;
  KernelSample s = t.sample;
  // The launch's call, with its start event's record: a long one waited for room in the queue.
  g_counted.timed_launches.fetch_add(1, kRlx);
  if (MonotonicNs() - s.launched_ns >= kBlockedLaunchNs) g_counted.blocked_launches.fetch_add(1, kRlx);
  // Its start event already done: the stream ran dry before the kernel was queued behind it,
  // and the pair times the host's launch too (MeasuresTheKernel).
  s.stream_dry = g_gate->api.event_query(s.start) == CUDA_SUCCESS;
  s.end = d.meter.pool.Get(g_gate->api);
  bool kept = false;
  if (s.end != nullptr && g_gate->api.event_record(s.end, t.stream) == CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(d.kernels.mu);
    const uint32_t head = d.kernels.head.load(kRlx);
    if (head - d.kernels.tail.load(std::memory_order_acquire) < kKernelSampleRing) {
      d.kernels.ring[head % kKernelSampleRing] = s;
      d.kernels.head.store(head + 1, std::memory_order_release);
      kept = true;
    }
  }
  if (!kept) {
    d.meter.pool.Put(s.start);
    if (s.end != nullptr) d.meter.pool.Put(s.end);
  }
}

thread_local uint32_t t_gate_waits = 0;  // sleeps of this thread in BeforeLaunch (WaitsOfThisThread)

}  // namespace

LaunchTicket BeforeLaunch(CUstream stream, bool per_thread, const KernelShape* shape, CUcontext ctx) {
  if (g_gate == nullptr) return {};
  Device* d = CurrentDevice(ctx);
  if (d == nullptr) return {};
  // On MPS an opportunistic process says it has work queued even where it knows of no
  // guaranteed peer: each process learns of the other at its own peer scan, and a guaranteed
  // process that learnt first would time its kernels meanwhile as alone, beside this one's,
  // and a kernel's baseline can come from one such sample.
  if (NothingToYieldTo(*d) || UnthrottledOnMps(*d)) {
    if (d->spatial) {
      SayWorkQueued(*d);
      if (!t_unmetered) t_unmetered = true;
    }
    return {};
  }
  const bool own_thread_stream = per_thread && (stream == nullptr || stream == CU_STREAM_PER_THREAD);
  if (CountsOnly(*d)) {
    // On MPS the controller judges a guaranteed process by its timed kernels, not by its
    // launches or busy time: a launch only says the process wants the GPU and has work queued,
    // for kUngatedHoldNs on the coarse clock (a few ns; a tick behind, which a 1 ms hold would
    // not outlast), and is timed now and then. No meter, no marker, no read-modify-write
    // shared with other processes. The coarse clock moves every few ms, so most launches
    // only read the entry's line: stores that change nothing would take it from the readers.
    // While the process only counts its launches (GateMode::kCount), only the launches
    // CountLaunch picked to time come here: one at least every kKernelSampleGapNs while it
    // launches, well within the hold.
    const int64_t until = MonotonicCoarseNs() + kUngatedHoldNs;
    if (d->entry->active_until_ns.load(kRlx) != until) d->entry->active_until_ns.store(until, kRlx);
    if (d->entry->inflight_until_ns.load(kRlx) != until) d->entry->inflight_until_ns.store(until, kRlx);
    LaunchTicket sampled;
    if (StartKernelSample(*d, own_thread_stream ? CU_STREAM_PER_THREAD : stream, shape, &sampled)) return sampled;
    return {};
  }
  StreamMeter* m = FindStream(*d, own_thread_stream ? CU_STREAM_PER_THREAD : stream, own_thread_stream ? ThreadKey() : 0);
  if (PublishOnly(*d) && !own_thread_stream) {
    const int64_t now = MonotonicNs();
    d->entry->active_until_ns.store(now + kActiveHoldNs, kRlx);
    d->entry->inflight_until_ns.store(now + kInflightHoldNs, kRlx);
    d->entry->launches.fetch_add(1, kRlx);
    if (m != nullptr) m->CountLaunch();
    return {};  // the marker is left to the gate thread
  }
  d->entry->launches.fetch_add(1, kRlx);
  // The first metered launch after unmetered ones: the work they queued on this stream counts
  // as queued until a marker after it completes, so that a guaranteed peer timing its kernels
  // in a pause the controller gives (or a cut) does not time them beside that work as alone.
  // Only this stream's: the thread launches on it now, so it is alive, and this thread may
  // record on it even where it is its per-thread default stream. Work it queued on others is
  // covered by the launches' word until said_until.
  if (t_unmetered && d->spatial) {
    t_unmetered = false;
    if (m != nullptr) m->CoverQueued(g_gate->api, d->meter.pool, MonotonicNs());
  }
  for (int64_t now = MonotonicNs();; now = MonotonicNs()) {
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
  const int64_t busy = m->BeforeLaunch(g_gate->api, d->meter.pool, spacing > 0 ? MonotonicNs() : 0, spacing);
  const int64_t now = MonotonicNs();
  Charge(*d, busy, now);
  d->entry->inflight_until_ns.store(now + kInflightHoldNs, kRlx);
  // Eager markers where queued-ahead work is bounded, and on per-thread default streams
  // (only the owning thread can record on those).
  return {d, m, DepthBounded(*d) || own_thread_stream, spacing};
}

void AfterLaunch(const LaunchTicket& ticket) {
  if (ticket.sample.start != nullptr) FinishKernelSample(ticket);
  if (ticket.meter == nullptr) return;
  ticket.meter->AfterLaunch(g_gate->api, ticket.device->meter.pool, ticket.eager, MonotonicNs(), ticket.marker_spacing_ns);
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
  Device* d = CurrentDevice(nullptr);
  if (d == nullptr) return 0;
  PollDevice(*d, MonotonicNs());
  return static_cast<uint64_t>(d->meter.busy_total.load(kRlx));
}

}  // namespace gslice::compute
