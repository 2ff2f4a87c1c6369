// The launch gate off the launch path: initialisation, the gate thread's passes (registering
// GPUs, the peer scan, following the slice's policy, polling the meters, the opportunistic
// control loop), and the handshakes with a pass (ForgetContext, exit). It samples the ledger
// and applies what the pure units decide (peers.h, policy.h's EffectivePolicy, the
// controllers). gate_state.h states who writes what.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "gate_state.h"
#include "gslice/options.h"
#include "gslice/quiet_thread.h"
#include "gslice/units.h"

namespace gslice::compute {

Gate* g_gate = nullptr;
ComputeLogFn g_trace = nullptr;

namespace {

// The gate thread's pass while gating: it publishes this process's queued work and samples
// the guaranteed peers, so its period bounds how stale both are (the lazy markers' spacing).
constexpr int64_t kPollGateNs = 200'000;
// ... while only watching for peers, and the peer scan: a guaranteed process that starts is
// seen this soon, well before a framework's first kernel.
constexpr int64_t kPollWatchNs = 10'000'000;
constexpr int64_t kPeerScanNs = 10'000'000;

ComputeLogFn g_log = nullptr;
std::once_flag g_init_once;
bool g_init_ok = false;

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

// ---- handshakes with a pass ------------------------------------------------------------

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

// ---- the slice's policy ----------------------------------------------------------------

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
// (ClassifyPeers); the share's weight and flag change in place, the turn bits stay.
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

// FollowedClass(): -1, or the class of the policy the gate applies (the same on every GPU).
std::atomic<int> g_followed_class{-1};

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
  if (g_followed_class.load(kRlx) >= 0 || slice.slice_class != g_gate->start_class) {
    g_followed_class.store(static_cast<int>(p.cls), kRlx);
  }
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

// ---- the peer scan ---------------------------------------------------------------------

// Refreshes d's peer list (alive entries on the same GPU, not ours, classified by
// ClassifyPeers) and frees dead ones of our slice, and publishes whether we take turns
// (kComputeTakesTurns), so that peers that do not are not waited for.
// REQUIRES: the window refreshed for this scan (ComputeWindow::Refresh, once for all GPUs).
void ScanPeers(Device& d) {
  if (g_gate->window == nullptr) return;
  FollowSlicePolicy(d);
  ComputeWindow& w = *g_gate->window;
  const ComputePolicy mine = PolicyOf(d);
  const PeerSelf self = {.cls = mine.cls, .share_set = mine.share_set, .cap_slice = CapSliceOf(EntryIndex(d))};
  const LedgerSlice* slices = g_gate->mapping->limits()->slices;
  PeerFacts found[kMaxPeers];
  int n = 0;
  for (int i = 0; i < kLedgerMaxComputeEntries && n < kMaxPeers; ++i) {
    if (!w.mapped(ComputeSliceOf(i))) {
      i += kLedgerSliceComputeEntries - 1 - ComputeEntryOf(i);  // the next slice's first entry
      continue;
    }
    LedgerComputeEntry& e = w.entry(i);
    if (&e == d.entry) continue;
    if (StateOf(e.state.load(std::memory_order_acquire)) != EntryState::kAlive || memcmp(e.uuid, d.uuid, 16) != 0) continue;
    if (!w.OwnerAliveElseFree(i)) continue;
    found[n++] = LoadPeerFacts(i, e, slices[ComputeSliceOf(i)]);
  }
  const PeerList list = ClassifyPeers(self, found, n);
  for (int k = 0; k < list.count; ++k) d.peers.words[k].store(list.words[k], kRlx);
  d.peers.count.store(list.count, std::memory_order_release);
  d.peers.opportunistic.store(list.opportunistic, kRlx);
  d.peers.guaranteed.store(list.guaranteed, kRlx);
  d.peers.share_peer.store(list.share_peer, kRlx);
  const bool published = (d.entry->share_permille.load(kRlx) & kComputeTakesTurns) != 0;
  if (list.share_peer && !published) d.entry->share_permille.fetch_or(kComputeTakesTurns, kRlx);
  if (!list.share_peer && published) d.entry->share_permille.fetch_and(~kComputeTakesTurns, kRlx);
}

// Gate when a GPU's policy limits this process (before any GPU is registered: the policy it
// started with) or peers need it to take part; only count launches where all they need is a
// guaranteed process's activity and kernel times on MPS (CountsOnly); else only watch.
GateMode WantedMode() {
  const auto limits = [](const ComputePolicy& p) { return p.capped() || p.cls == ComputeClass::kOpportunistic; };
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  if (n == 0 && limits(g_gate->env)) return GateMode::kGate;
  GateMode mode = GateMode::kWatch;
  for (int i = 0; i < n; ++i) {
    const Device& d = g_gate->devices[i];
    if (limits(PolicyOf(d))) return GateMode::kGate;
    if (d.peers.opportunistic.load(kRlx) == 0 && !d.peers.share_peer.load(kRlx)) continue;
    if (!CountsOnly(d)) return GateMode::kGate;
    mode = GateMode::kCount;
  }
  return mode;
}

// Sets the gate's mode, with a trace line when it changes.
void SetMode(GateMode mode) {
  const int before = g_gate_mode.exchange(static_cast<int>(mode), kRlx);
  if (before == static_cast<int>(mode)) return;
  TraceLine("compute: launches %s", mode == GateMode::kGate    ? "pass the gate"
                                    : mode == GateMode::kCount ? "are counted and some timed (guaranteed work on MPS "
                                                                 "beside opportunistic work)"
                                                               : "pass untouched");
}

// ---- the opportunistic control loop ----------------------------------------------------

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
// Returns whether a guaranteed peer has work queued or wanted the GPU at now.
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
                                      .overlap_ns = s.overlap_ns, .floor_permille = PeerFloor(word),
                                      .kernel_signal = e.kernel_signal.load(kRlx)};
    s.busy_ns = 0;
    s.overlap_ns = 0;
  });
}

bool OpportunisticQueued(Device& d, int64_t now);

// The opportunistic rate controller's loop, run by the gate thread every pass: samples the
// guaranteed peers, and once per kControlPeriodNs hands the period to the GPU's controller
// (time-sliced or MPS) and publishes its decision for the launching threads.
void ControlOpportunisticRate(Device& d, int64_t now) {
  ControlLoop& c = d.control;
  if (SampleGuaranteed(d, now)) c.busy_seen = true;
  // This process wanted the GPU: it launched (its hold says so) or waits at the gate.
  const LedgerComputeEntry* own = d.entry;
  if (own != nullptr && (own->active_until_ns.load(kRlx) > now || own->inflight_until_ns.load(kRlx) > now)) {
    c.wanted_seen = true;
  }
  if (!c.others_seen && d.peers.opportunistic.load(kRlx) > 0 && OpportunisticQueued(d, now)) c.others_seen = true;
  if (now < c.next_ns) return;
  c.next_ns = now + kControlPeriodNs;
  ControlPeriod period;
  period.guaranteed_busy = c.busy_seen;
  period.opportunistic_peers = d.peers.opportunistic.load(kRlx);
  period.opportunistic_busy = c.others_seen;
  period.wanted = c.wanted_seen;
  c.busy_seen = c.wanted_seen = c.others_seen = false;
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

// ---- kernel timing (KernelTiming, kernel_clock.h) -------------------------------------

// Whether an opportunistic peer of d has work queued at now.
bool OpportunisticQueued(Device& d, int64_t now) {
  const int n = d.peers.count.load(std::memory_order_acquire);
  for (int k = 0; k < n; ++k) {
    const uint32_t word = d.peers.words[k].load(kRlx);
    if (!PeerGuaranteed(word) && g_gate->window->entry(PeerIndex(word)).inflight_until_ns.load(kRlx) > now) return true;
  }
  return false;
}

// Every pass, for a guaranteed process on MPS: whether launches are sampled, the completed
// samples into the clock (beside opportunistic work when a pass from just before the launch
// to now saw its work queued; read only where read_samples says the context is bound, so
// their events are alive), the launch count into the progress clock while counting, and once
// per kControlPeriodNs the period's reading into the compute entry, where opportunistic
// processes' controllers read it.
// The trace's words for a period's waits (TimeKernels).
struct WaitedWords {
  char text[48];
};
WaitedWords WaitedText(int64_t waited_ns, bool blocked) {
  WaitedWords w{};
  if (blocked) {
    snprintf(w.text, sizeof w.text, "the host waited in a full launch queue");
  } else if (waited_ns < 0) {
    snprintf(w.text, sizeof w.text, "the host made no waiting call");
  } else {
    snprintf(w.text, sizeof w.text, "the host waited %.1f ms", static_cast<double>(waited_ns) / 1e6);
  }
  return w;
}

// Returns whether this GPU's launches should be timed densely now: its clock wants baselines
// and no opportunistic work is queued (kKernelSampleDenseEvery).
bool TimeKernels(Device& d, int64_t now, bool read_samples) {
  KernelTiming& k = d.kernels;
  const bool sample = d.spatial && g_gate->window != nullptr && PolicyOf(d).cls == ComputeClass::kGuaranteed &&
                      d.peers.opportunistic.load(kRlx) > 0;
  if (k.sampling.load(kRlx) != sample) k.sampling.store(sample, kRlx);
  if (sample && !g_counted.count_waits.load(kRlx)) g_counted.count_waits.store(true, kRlx);
  const bool queued = sample && OpportunisticQueued(d, now);
  if (queued) k.opportunistic_busy_ns = now;
  // Not while launches are timed densely alone (the kernels' baselines): one in
  // kKernelSampleDenseEvery costs ~5 us, which would lower the launch rate alone and raise the
  // share not waiting that the job's references alone take there.
  const bool timed_densely = sample && !queued && k.wants_baseline;
  const bool counting = g_gate_mode.load(kRlx) == static_cast<int>(GateMode::kCount);
  const uint64_t launched = g_counted.launches.load(kRlx);
  if (sample && counting && d.entry != nullptr && d.entry->launches.load(kRlx) != launched) {
    // The launch count where opportunistic controllers read it (PeerPeriod::launches: a look,
    // mps_controller.h): the launch path only counts in this process (CountLaunch), writing
    // nothing other processes read; here once a pass, on a line the launch path does not read.
    // (The process's launches on all its GPUs: a job on several is paced by all of them.)
    d.entry->launches.store(launched, kRlx);
  }
  if (sample && !timed_densely && counting) {
    k.progress.Pass(now, launched, queued,
                    g_counted.count_waits.load(kRlx) ? g_counted.waited_ns.load(kRlx) : -1);
  } else {
    k.progress.Pause();
  }
  const uint32_t head = k.head.load(std::memory_order_acquire);
  if (head != k.seen_head || k.newest_sample_ns == 0) {
    k.seen_head = head;
    k.newest_sample_ns = now;
  }
  // The launch after a gap with none timed is (a job of few, long kernels; CountLaunch).
  if (sample && now - k.newest_sample_ns >= kKernelSampleGapNs && !g_counted.time_next.load(kRlx)) {
    g_counted.time_next.store(true, kRlx);
  }
  uint32_t tail = k.tail.load(kRlx);
  for (; read_samples && tail != head; ++tail) {
    const KernelSample& s = k.ring[tail % kKernelSampleRing];
    const CUresult done = g_gate->api.event_query(s.end);
    if (done == CUDA_ERROR_NOT_READY) break;
    float ms = 0;
    if (done == CUDA_SUCCESS && g_gate->api.event_elapsed(&ms, s.start, s.end) == CUDA_SUCCESS) {
      const bool beside = k.opportunistic_busy_ns >= s.launched_ns - kPollGateNs;
      k.clock.Add(s.key, static_cast<int64_t>(static_cast<double>(ms) * 1e6), beside, s.stream_dry);
    }
    d.meter.pool.Put(s.start);
    d.meter.pool.Put(s.end);
  }
  k.tail.store(tail, std::memory_order_release);
  if (!sample) k.wants_baseline = false;
  if (!sample || now < k.next_period_ns) return timed_densely;
  const int64_t period_ns = k.next_period_ns == 0 ? 0 : now - (k.next_period_ns - kControlPeriodNs);
  k.next_period_ns = now + kControlPeriodNs;
  if (++k.sequence > 0xffffu) k.sequence = 1;
  const uint64_t launches = g_counted.launches.load(kRlx);
  // The host's waits on the GPU in the period (kernel_clock.h, "the critical path"). No cap
  // where a launch waited for room in the queue, or where the host made no waiting call at
  // all (a job that waits by polling an event is not seen waiting). All GPUs' waits
  // together: a wait on another GPU only makes the cap larger.
  const uint64_t waits = g_counted.waits.load(kRlx);
  const int64_t waited = g_counted.waited_ns.load(kRlx);
  const uint64_t timed = g_counted.timed_launches.load(kRlx);
  const uint64_t long_launches = g_counted.blocked_launches.load(kRlx);
  const bool blocked = WaitedInAFullQueue(timed - k.period_timed, long_launches - k.period_blocked);
  k.period_timed = timed;
  k.period_blocked = long_launches;
  const int64_t waited_ns = blocked || waits == k.period_waits ? -1 : waited - k.period_waited_ns;
  k.period_waits = waits;
  k.period_waited_ns = waited;
  // A job that launches without pause is read by its launches, one whose host keeps busy
  // alone by its waits (progress_clock.h, PeriodSpeed); either asks for time alone to renew
  // its references (KernelSignal::wants_alone), which the controller grants only near the
  // floor. Kernels read faster than their baselines ask for new ones only where the kernels
  // give the reading: otherwise their baselines do not move it, and the pause costs the
  // opportunistic job a period for nothing (on an H200 a job read by its launches in 413 of
  // 421 periods asked so in 27).
  const uint32_t progress = k.progress.ClosePeriod();
  const uint32_t by_waits = k.progress.waits_reading();
  KernelSignal signal = k.clock.ClosePeriod(k.sequence, launches - k.period_launches, period_ns, waited_ns,
                                            /*kernels_read=*/progress == 0 && by_waits == 0);
  k.period_launches = launches;
  const char* wanted_because = k.clock.wanted_because();
  // (Launches are timed densely alone only for the kernels' baselines: the timing's cost would
  // lower the launch rate alone taken in the same pause.)
  k.wants_baseline = signal.wants_baseline;
  signal.wants_alone = k.progress.wants_alone();
  if (!signal.wants_baseline && signal.wants_alone) wanted_because = "to renew its references";
  const uint32_t bound = signal.speed_permille;
  signal.speed_permille = PeriodSpeed(bound, progress, by_waits);
  // A loop is judged by looks from its first period beside, before it has a reference alone
  // for a reading by its launches: on an H200 ResNet-50 read by its kernels in its first
  // seconds was cut to a quarter, and the growth back cost a round's harvest.
  signal.by_progress = progress > 0 || by_waits > 0 || k.progress.loop();
  d.entry->kernel_signal.store(PackKernelSignal(signal), kRlx);
  if (signal.known() || signal.wants_baseline || signal.wants_alone) {
    const ProgressClock::Seen& seen = k.progress.seen();
    // The other reading: the kernels' bound where the launches or the waits gave the reading.
    // And, for a job busy alone and beside, its launch rate against alone (the trace only).
    char rate[96] = "";
    int at = 0;
    if ((progress > 0 || by_waits > 0) && bound > 0) {
      at = snprintf(rate, sizeof rate, ", kernels' times at least %.3f", bound / 1000.0);
    } else if (!seen.fresh) {
      at = snprintf(rate, sizeof rate, ", no fresh rate alone");
    }
    if (seen.launch_rate_permille > 0 && progress == 0 && at >= 0 && at < static_cast<int>(sizeof rate)) {
      snprintf(rate + at, sizeof rate - at, ", launch rate %.3f", seen.launch_rate_permille / 1000.0);
    }
    TraceLine("compute: beside opportunistic work at least %.3f of its speed alone, by its %s%s%s "
              "(%d kernels timed alone, %d samples on a dry stream left out, %d alone over %.0fx their "
              "baseline; %s; launches: %lld ms alone in %d%% of passes, %lld ms beside in %d%%%s)",
              signal.speed_permille / 1000.0, PeriodSpeedSource(progress, by_waits),
              signal.wants_baseline ? "; wants a baseline: " : signal.wants_alone ? "; wants time alone: " : "",
              wanted_because, k.clock.kernels(),
              k.clock.dry_left_out(), k.clock.slow_alone(), kSlowAloneFactor,
              WaitedText(waited_ns, blocked).text,
              static_cast<long long>(seen.alone_ms), seen.alone_moved_permille / 10,
              static_cast<long long>(seen.beside_ms), seen.beside_moved_permille / 10, rate);
  }
  return timed_densely;
}

// The pending samples of a context that goes away: dropped (their events go with it).
// REQUIRES: no gate-thread pass polls d (ForgetContext's handshake).
void ForgetKernelSamples(Device& d) {
  std::lock_guard<std::mutex> lock(d.kernels.mu);
  d.kernels.tail.store(d.kernels.head.load(kRlx), std::memory_order_release);
}

// ---- the gate thread -------------------------------------------------------------------

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

// Other slices' compute pages are copies (ComputeWindow): besides the peer scan's full
// refresh, the pages of the slices that hold a peer of ours are copied again every pass, so
// that launching threads read their activity times (kActiveHoldNs ahead) fresh. One pread per
// such slice.
void SyncPeerPages(int devices) {
  uint64_t slices = 0;
  for (int i = 0; i < devices; ++i) {
    const Device& d = g_gate->devices[i];
    const int count = d.peers.count.load(std::memory_order_acquire);
    for (int k = 0; k < count; ++k) slices |= uint64_t{1} << ComputeSliceOf(PeerIndex(d.peers.words[k].load(kRlx)));
  }
  if (slices != 0) g_gate->window->Sync(slices);
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
    const int64_t now = MonotonicNs();
    const bool scan = now - last_scan >= kPeerScanNs;
    // One refresh of other slices' copied pages per scan, for every GPU's ScanPeers.
    if (scan && g_gate->window != nullptr) g_gate->window->Refresh();
    if (scan) RegisterActiveDevices();
    const int n = g_gate->device_count.load(std::memory_order_acquire);
    const int mode = g_gate_mode.load(kRlx);
    const bool gating = mode == static_cast<int>(GateMode::kGate) || mode == static_cast<int>(GateMode::kCount);
    if (gating && !scan && g_gate->window != nullptr) SyncPeerPages(n);
    bool dense = false;  // some GPU's launches are to be timed densely (TimeKernels)
    bool waits_queue = false;  // an opportunistic GPU on MPS: waits say work is queued
    for (int i = 0; i < n; ++i) {
      Device& d = g_gate->devices[i];
      if (scan) ScanPeers(d);
      CUcontext ctx = d.ctx.load(std::memory_order_seq_cst);  // seq_cst: ForgetContext's handshake
      if (!gating) continue;
      // While counting, a GPU the process launches on has no context bound until a launch
      // there is timed: the gate thread asks for one (TimeKernels), and reads no samples.
      if (ctx == nullptr) {
        if (d.spatial) dense |= TimeKernels(d, now, /*read_samples=*/false);
        continue;
      }
      // Lazy markers are recorded on the app's streams from here: the context must be current.
      if (current != ctx && g_gate->api.ctx_set_current(ctx) == CUDA_SUCCESS) current = ctx;
      // On MPS nobody judges a publish-only guaranteed process by its measured busy time (the
      // MPS controller reads its kernels): its launches meter nothing, and the gate thread
      // records no markers on its streams, which keeps it off their driver lock.
      if (!CountsOnly(d)) PollDevice(d, now);
      if (d.spatial) dense |= TimeKernels(d, now, /*read_samples=*/true);
      if (PolicyOf(d).cls == ComputeClass::kOpportunistic) {
        waits_queue |= d.spatial;
        ControlOpportunisticRate(d, now);
        UpdateNear(d, now);
      }
    }
    const uint32_t every = dense ? kKernelSampleDenseEvery : kKernelSampleEvery;
    if (g_counted.every.load(kRlx) != every) g_counted.every.store(every, kRlx);
    if (gating && g_counted.waits_say_queued.load(kRlx) != waits_queue) g_counted.waits_say_queued.store(waits_queue, kRlx);
    if (scan) {
      last_scan = now;
      if (!g_stop.load(std::memory_order_relaxed)) SetMode(WantedMode());
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
  if (OptionIsSet(Option::Class)) g_followed_class.store(static_cast<int>(gate.env.cls), kRlx);
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
      // A class above the slice's is not the process's from the start (EffectivePolicy).
      if (g_followed_class.load(kRlx) >= 0) {
        g_followed_class.store(static_cast<int>(EffectivePolicy(gate.env, {.slice_class = gate.start_class}, gate.start_class).cls), kRlx);
      }
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
  SetMode(WantedMode());
}

// This process's share of the GPU's SMs, in permille. Under MPS a client's share is its
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, read by the driver when the process connects, and what
// gslice run, the device plugin and the DRA driver set for a cap. The driver cannot say it:
// an MPS client is told only its own SMs (the device attribute and cuCtxGetExecAffinity both
// give 66 of an H200's 132 at 50%), so the variable, as the process started with it, is the
// measure; without it, all of them.
uint32_t SmPermille() {
  const char* v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  if (v == nullptr || *v == '\0') return 1000;
  char* end = nullptr;
  const double pct = strtod(v, &end);
  return end != v && *end == '\0' && pct > 0 && pct < 100 ? static_cast<uint32_t>(pct * 10 + 0.5) : 1000;
}

// Sets d.sm_permille, where d is shared through MPS, to this process's share of its SMs.
void LearnSmShare(Device& d) {
  if (!d.spatial) return;
  const uint32_t permille = SmPermille();
  if (d.sm_permille.exchange(permille, kRlx) != permille && permille < 1000) {
    LogLine("compute: MPS gives this process %u.%u%% of the GPU's SMs; its GPU time counts at that share",
            permille / 10, permille % 10);
  }
}

}  // namespace

Device* AddDevice(const uint8_t uuid[16], CUdevice dev, CUcontext ctx) {
  const int n = g_gate->device_count.load(std::memory_order_acquire);
  if (n == kMaxContexts) return nullptr;
  Device& d = g_gate->devices[n];
  memcpy(d.uuid, uuid, 16);
  int mps = 0;
  d.spatial = g_gate->api.device_get_attribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == CUDA_SUCCESS && mps != 0;
  LearnSmShare(d);
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
  if (g_gate->window != nullptr) g_gate->window->Refresh();
  ScanPeers(d);
  g_gate->device_count.store(n + 1, std::memory_order_release);
  return &d;
}

int FollowedClass() { return g_followed_class.load(kRlx); }

bool InitLaunchGate(void* (*resolve)(const char*), ComputeLogFn log, ComputeLogFn trace) {
  if (log != nullptr) g_log = log;
  if (trace != nullptr) g_trace = trace;
  std::call_once(g_init_once, InitOnce, resolve);
  return g_init_ok;
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
    ForgetKernelSamples(d);
    d.meter.pool.Forget();
  }
}

}  // namespace gslice::compute
