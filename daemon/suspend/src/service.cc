#include "gslice/suspend/service.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "gslice/clock.h"
#include "gslice/nvml_subset.h"

namespace gslice::suspend {

namespace {

std::string UuidText(const uint8_t b[16]) {
  CUuuid u;
  std::memcpy(u.bytes, b, 16);
  return FormatGpuUuid(u);
}

// A process as the ledger has it.
struct LedgerProcessInfo {
  bool found = false;
  ProcessInfo info;
};

// The ledger slot of the process known as pid in pid namespace pid_ns (a container's process
// by its container-local pid); info.pid becomes host_pid, the pid the service sees.
LedgerProcessInfo FindInLedger(Ledger& ledger, uint64_t pid_ns, uint32_t pid, int host_pid) {
  LedgerProcessInfo out;
  const LedgerLimits* l = ledger.limits();
  if (l == nullptr || pid == 0) return out;
  for (int i = 0; i < kLedgerMaxSlices; ++i) {
    const LedgerSlice& s = l->slices[i];
    if (StateOf(s.state.load()) != EntryState::kReady) continue;
    if (ledger.MapUsage(i) != LedgerError::kOk) continue;
    const LedgerUsage& u = *ledger.usage(i);
    const uint32_t hw = u.head.slot_high_water.load();
    for (uint32_t k = 0; k < hw && k < static_cast<uint32_t>(kLedgerMaxSlots); ++k) {
      const uint64_t word = u.slots[k].state.load();
      if (StateOf(word) != EntryState::kAlive || PidOf(word) != pid || u.slots[k].pid_ns.load() != pid_ns) continue;
      out.found = true;
      out.info.pid = host_pid;
      out.info.slice.assign(s.name, strnlen(s.name, sizeof s.name));
      out.info.opportunistic = s.slice_class == static_cast<uint32_t>(SliceClass::kOpportunistic);
      int64_t most = -1;
      for (int g = 0; g < kLedgerMaxGpus; ++g) {
        if (StateOf(s.gpus[g].state.load()) != EntryState::kReady) continue;
        const int64_t used = u.used[g][k].load();
        if (used > 0) out.info.device_bytes += static_cast<uint64_t>(used);
        if (used > most) {
          most = used;
          out.info.gpu_uuid = UuidText(s.gpus[g].uuid);
        }
      }
      return out;
    }
  }
  return out;
}

}  // namespace

// Publishes each state to the process's gate: closed from the moment a suspend starts
// (new calls wait in the shim instead of piling up on the driver's lock) until the process
// runs again; then the waiters are woken.
class SuspendService::BoardObserver : public StateObserver {
 public:
  BoardObserver(SuspendService* service, std::function<void(const ProcessStatus&)> on_state)
      : service_(service), on_state_(std::move(on_state)) {}
  void OnStateChanged(const ProcessStatus& s, State) override {
    if (auto ref = service_->EntryOf(s.info.pid)) {
      // Failed: the driver reports an error; let calls reach it and fail there rather than
      // hang at the gate.
      const bool closed = s.state != State::kRunning && s.state != State::kFailed;
      service_->board_.SetGate(*ref, closed);
    }
    if (on_state_) on_state_(s);
  }
  void OnForgotten(int, const std::string&) override {}

 private:
  SuspendService* service_;
  std::function<void(const ProcessStatus&)> on_state_;
};

std::unique_ptr<SuspendService> SuspendService::Create(ServiceOptions options, std::string* error) {
  auto driver = DlopenCheckpointDriver::Open(options.driver_library.c_str(), error);
  if (!driver) return nullptr;
  return CreateWithDriver(std::move(options), std::move(driver), error);
}

std::unique_ptr<SuspendService> SuspendService::CreateWithDriver(
    ServiceOptions options, std::unique_ptr<CheckpointDriver> driver, std::string* error) {
  std::unique_ptr<SuspendService> s(new SuspendService());
  if (!s->Init(std::move(options), std::move(driver), error)) return nullptr;
  return s;
}

bool SuspendService::Init(ServiceOptions options, std::unique_ptr<CheckpointDriver> driver,
                          std::string* error) {
  options_ = std::move(options);
  if (LedgerError e = ledger_.Open(options_.ledger_path.c_str()); e != LedgerError::kOk) {
    *error = "cannot open the node ledger " + options_.ledger_path + ": " + LedgerErrorString(e) + " (" +
             ledger_.detail() + ")";
    return false;
  }
  std::string board_error;
  if (!board_.Open(options_.board_path.c_str(), true, &board_error)) {
    *error = "cannot open the suspend board " + options_.board_path + ": " + board_error;
    return false;
  }
  driver_ = std::move(driver);
  budget_ = std::make_unique<HostMemoryBudget>(options_.host);
  resolver_ = std::make_unique<PidResolver>(options_.proc_root);
  observer_ = std::make_unique<BoardObserver>(this, options_.on_state);
  // Liveness as the proc mount that names the pids says (kill(pid, 0) for the real one).
  std::function<bool(int)> is_alive;
  if (options_.proc_root != "/proc") {
    is_alive = [root = options_.proc_root](int pid) {
      PidIdentity who;
      return pid > 0 && IdentifyPid(root, static_cast<uint32_t>(pid), &who);
    };
  }
  manager_ = std::make_unique<SuspendManager>(driver_.get(), budget_.get(), options_.manager,
                                              observer_.get(), std::move(is_alive));
  controller_ = std::make_unique<SuspendController>(manager_.get(), options_.controller);
  return true;
}

SuspendService::~SuspendService() { Stop(); }

void SuspendService::Start() {
  board_.SetService();
  stop_.store(false);
  // The heartbeat tells shims and `gslice move` that a service is there; ticks can take a
  // minute (a checkpoint of tens of GiB), so it has its own thread.
  heartbeat_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(heartbeat_mu_);
    while (!stop_.load()) {
      board_.Heartbeat();
      heartbeat_cv_.wait_for(lock, std::chrono::milliseconds(1000), [this] { return stop_.load(); });
    }
  });
  thread_ = std::thread([this] {
    int64_t last_tick = 0;
    while (!stop_.load()) {
      const uint32_t wake = board_.header()->wake.load(std::memory_order_acquire);
      const uint64_t bells = board_.Doorbells();
      // Shims ringing without pause (a hostile one can) get at most one tick per 5 ms.
      const int64_t since = MonotonicNs() - last_tick;
      if (since < 5'000'000) std::this_thread::sleep_for(std::chrono::nanoseconds(5'000'000 - since));
      last_tick = MonotonicNs();
      Tick();
      if (stop_.load()) break;
      // A shim that rang during the tick: its wake-up may have come before we sleep (shims
      // cannot change the word we sleep on), so look at the doorbells themselves.
      if (board_.Doorbells() != bells) continue;
      board_.WaitForWork(wake, options_.tick_ms);
    }
  });
}

void SuspendService::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(heartbeat_mu_);
    stop_.store(true);
  }
  heartbeat_cv_.notify_all();
  board_.WakeService();
  thread_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  board_.ClearService();
}

void* SuspendService::Nvml() {
  if (!nvml_tried_) {
    nvml_tried_ = true;
    const char* lib = options_.nvml_library.empty() ? "libnvidia-ml.so.1" : options_.nvml_library.c_str();
    nvml_ = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (nvml_ != nullptr) {
      auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml_, "nvmlInit_v2"));
      if (init == nullptr || init() != NVML_SUCCESS) nvml_ = nullptr;
    }
  }
  return nvml_;
}

bool SuspendService::DescribeGpu(const std::string& uuid, GpuInfo* out) {
  void* nvml = Nvml();
  if (nvml == nullptr) return false;
  auto by_uuid = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
      dlsym(nvml, "nvmlDeviceGetHandleByUUID"));
  auto mem = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
  auto name = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(dlsym(nvml, "nvmlDeviceGetName"));
  nvmlDevice_t dev;
  nvmlMemory_t m;
  char buf[96] = {};
  if (by_uuid == nullptr || mem == nullptr || name == nullptr || by_uuid(uuid.c_str(), &dev) != NVML_SUCCESS ||
      mem(dev, &m) != NVML_SUCCESS || name(dev, buf, sizeof buf) != NVML_SUCCESS) {
    return false;
  }
  out->uuid = uuid;
  out->name = buf;
  out->free_bytes = m.free;
  return true;
}

uint64_t SuspendService::FreeBytes(const std::string& gpu) {
  if (options_.free_bytes) return options_.free_bytes(gpu);
  GpuInfo g;
  return DescribeGpu(gpu, &g) ? g.free_bytes : 0;
}

int SuspendService::Verified(const SuspendServiceBoard::Ref& r, int known_host_pid) {
  const auto key = std::make_tuple(r.part, r.index, r.owner);
  const int64_t now = MonotonicNs();
  if (auto it = verified_.find(key); it != verified_.end() && (it->second.first != 0 || now < it->second.second)) {
    return it->second.first;
  }
  const SuspendShimEntry& e = board_.Entry(r);
  const uint32_t host = known_host_pid > 0 ? static_cast<uint32_t>(known_host_pid)
                                           : resolver_->Resolve(e.pid_ns.load(std::memory_order_relaxed),
                                                                BoardOwnerPid(r.owner),
                                                                e.start_time.load(std::memory_order_relaxed));
  if (host == 0) return 0;  // not visible (yet): asked again next time
  const auto& part = board_.partitions()[r.part];
  // The entry is the partition owner's word; only a process that maps the partition
  // writable (its own shim) makes it speak for that process.
  const bool ok = host != 0 && ProcessMapsFileWritable(options_.proc_root, static_cast<int>(host), part.dev, part.ino);
  if (!ok) {
    std::fprintf(stderr, "gslice suspend: ignoring entry %d of partition %s: it names pid %u, which does not map it\n",
                 r.index, part.name.c_str(), host);
  }
  if (verified_.size() > 100'000) verified_.clear();
  // Refusals are looked at again after a while (not every tick: a partition can name 4096
  // processes).
  verified_[key] = {ok ? static_cast<int>(host) : 0, now + 10'000'000'000LL};
  return ok ? static_cast<int>(host) : 0;
}

std::optional<SuspendServiceBoard::Ref> SuspendService::EntryOf(int host_pid) {
  {
    std::lock_guard<std::mutex> lock(entries_mu_);
    auto it = entry_of_.find(host_pid);
    if (it != entry_of_.end()) {
      if (board_.Alive(it->second)) return it->second;
      entry_of_.erase(it);
    }
  }
  PidIdentity who;
  if (!IdentifyPid(options_.proc_root, static_cast<uint32_t>(host_pid), &who)) return std::nullopt;
  // A second look rescans the folders at once (a partition made in the last 100 ms).
  for (bool force : {false, true}) {
    board_.Refresh(force);
    for (const SuspendServiceBoard::Ref& r : board_.LiveEntries()) {
      const SuspendShimEntry& e = board_.Entry(r);
      if (BoardOwnerPid(r.owner) != who.pid || e.pid_ns.load(std::memory_order_relaxed) != who.pid_ns ||
          e.start_time.load(std::memory_order_relaxed) != who.start_time || Verified(r, host_pid) != host_pid) {
        continue;
      }
      board_.Own(r);
      std::lock_guard<std::mutex> lock(entries_mu_);
      entry_of_[host_pid] = r;
      return r;
    }
  }
  return std::nullopt;
}

std::vector<ProcessSample> SuspendService::Sample() {
  std::vector<ProcessSample> samples;
  std::set<int> seen;
  // Partitions whose processes are all gone are forgotten here only, before any Ref of this
  // tick is taken; Refs kept from earlier ticks name partitions by index, so they go too.
  if (board_.Prune()) {
    verified_.clear();
    std::lock_guard<std::mutex> lock(entries_mu_);
    entry_of_.clear();
  }
  board_.Refresh();
  for (const SuspendServiceBoard::Ref& r : board_.LiveEntries()) {
    // The driver's checkpoint calls name processes as we see them: a process in a container
    // is known on the board by its container-local pid and mapped here. One we cannot see
    // (another pid namespace that is not nested in ours) cannot be suspended.
    const int pid = Verified(r);
    if (pid == 0 || !seen.insert(pid).second) continue;
    board_.Own(r);
    {
      std::lock_guard<std::mutex> lock(entries_mu_);
      entry_of_[pid] = r;
    }
    const SuspendShimEntry& e = board_.Entry(r);
    ProcessSample s;
    LedgerProcessInfo lp = FindInLedger(ledger_, e.pid_ns.load(std::memory_order_relaxed), BoardOwnerPid(r.owner), pid);
    if (lp.found) {
      s.info = lp.info;
    } else {
      s.info.pid = pid;  // shimmed without a slice: no limits, no class
    }
    s.activity = e.activity.load(std::memory_order_relaxed);
    s.resume_requested = e.resume_request.load(std::memory_order_relaxed) != 0;
    if (options_.idle_timeout_s && !s.info.slice.empty()) {
      s.idle_timeout_ns = options_.idle_timeout_s(s.info.slice) * 1'000'000'000LL;
    }
    samples.push_back(s);
  }
  board_.UpdateAttach();
  return samples;
}

void SuspendService::AnswerMemoryRequests(int64_t now) {
  for (const SuspendServiceBoard::Ref& r : board_.LiveEntries()) {
    SuspendGateEntry* g = board_.Gate(r);
    const SuspendShimEntry& snap = board_.Entry(r);
    const uint64_t seq = snap.mem_request_seq.load(std::memory_order_relaxed);
    if (g == nullptr || seq == 0) continue;
    if (g->owner.load(std::memory_order_acquire) == r.owner && g->mem_reply_seq.load(std::memory_order_acquire) == seq) {
      continue;
    }
    const int pid = Verified(r);
    if (pid == 0) continue;
    board_.Own(r);
    // The request's fields again, read after its seq (the snapshot's copy may have been
    // taken while the shim wrote them).
    SuspendShimEntry fresh;
    if (!board_.Reread(r, &fresh) || fresh.mem_request_seq.load(std::memory_order_relaxed) != seq) continue;
    const uint64_t bytes = fresh.mem_request_bytes.load(std::memory_order_relaxed);
    const std::string gpu = UuidText(fresh.mem_request_gpu);
    PreemptResult res;
    LedgerProcessInfo lp = FindInLedger(ledger_, snap.pid_ns.load(std::memory_order_relaxed), BoardOwnerPid(r.owner), pid);
    if (lp.found && lp.info.opportunistic) {
      res.reason = "an opportunistic slice does not preempt";
    } else {
      // The shim asks after the driver refused, so what NVML reports free (less a margin for
      // what the driver keeps back) is not enough; free the rest.
      const uint64_t free_now = FreeBytes(gpu);
      const uint64_t margin = options_.controller.resume_margin_bytes;
      res = controller_->Preempt(gpu, bytes, free_now > margin ? free_now - margin : 0, now);
      // The suspends just done may have taken longer than the quiet period: it starts now,
      // as the requester is told to retry, so its victims do not resume under its allocation.
      if (!res.outcomes.empty()) controller_->HoldResumes(gpu, MonotonicNs());
    }
    if (!res.ok) {
      std::fprintf(stderr, "gslice suspend: pid %d needs %llu bytes on %s: %s\n", pid,
                   static_cast<unsigned long long>(bytes), gpu.c_str(), res.reason.c_str());
    }
    g->mem_reply.store(res.ok ? kMemReplyFreed : kMemReplyRefused, std::memory_order_release);
    g->mem_reply_seq.store(seq, std::memory_order_release);
    FutexWakeAll(&g->mem_reply);
  }
}

// `gslice move PID --to GPU`: suspend the process if it runs, restore it on the target
// through GPU pairs; if the move is refused, a process this request suspended is resumed
// where it was, so a refused move changes nothing.
void SuspendService::AnswerMoveRequests() {
  for (const SuspendServiceBoard::Ref& r : board_.LiveEntries()) {
    SuspendGateEntry* g = board_.Gate(r);
    if (g == nullptr) continue;
    const uint64_t seq = g->move_seq.load(std::memory_order_acquire);
    if (seq == 0 || seq == g->move_reply_seq.load(std::memory_order_acquire)) continue;
    const bool for_this_owner = g->move_owner.load(std::memory_order_acquire) == r.owner;
    uint8_t target[16];
    std::memcpy(target, g->move_to_gpu, 16);
    const int pid = for_this_owner ? Verified(r) : 0;
    const std::string to_uuid = UuidText(target);
    if (pid != 0) TrackFromLedger(pid);
    std::string why;
    bool moved = false;
    auto st = pid != 0 ? manager_->Get(pid) : std::nullopt;
    GpuInfo from, to;
    if (!for_this_owner) {
      why = "the request was for an earlier process of that board entry";
    } else if (pid == 0) {
      why = "process " + std::to_string(BoardOwnerPid(r.owner)) + " of another pid namespace is not visible here";
    } else if (!st) {
      why = "not a known GPU process";
    } else if (st->info.gpu_uuid.empty() || !DescribeGpu(st->info.gpu_uuid, &from)) {
      why = "cannot tell which GPU it uses (no ledger entry or NVML)";
    } else if (!DescribeGpu(to_uuid, &to)) {
      why = "no GPU " + to_uuid + " on this node";
    } else {
      const bool was_running = st->state == State::kRunning;
      Outcome o;
      if (was_running) o = manager_->Suspend(pid, Cause::kMove);
      if (was_running && !o.ok) {
        why = o.reason;
      } else {
        to.free_bytes = FreeBytes(to_uuid);
        Outcome m = controller_->Move(pid, from, to);
        moved = m.ok;
        if (!moved) {
          why = m.reason;
          if (was_running) manager_->Resume(pid);
        }
      }
    }
    if (!moved) std::fprintf(stderr, "gslice suspend: move of pid %d refused: %s\n", pid, why.c_str());
    g->move_reply.store(moved ? kMoveReplyMoved : kMoveReplyRefused, std::memory_order_release);
    g->move_reply_seq.store(seq, std::memory_order_release);
    FutexWakeAll(&g->move_reply);
  }
}

TickReport SuspendService::Tick() {
  std::lock_guard<std::mutex> lock(tick_mu_);
  const int64_t now = MonotonicNs();
  std::vector<ProcessSample> samples = Sample();
  // First sight of a process (or of every process after a restart): ask the driver where
  // it is, so a process left suspended by an earlier service is known as suspended.
  for (const ProcessSample& s : samples) {
    if (!manager_->Get(s.info.pid)) manager_->Adopt(s.info);
  }
  AnswerMemoryRequests(now);
  AnswerMoveRequests();
  return controller_->Tick(samples, [this](const std::string& g) { return FreeBytes(g); }, now);
}

void SuspendService::TrackFromLedger(int pid) {
  if (manager_->Get(pid)) return;
  // pid is as we see it; the ledger knows the process by its own pid in its own namespace.
  PidIdentity who;
  LedgerProcessInfo lp;
  if (IdentifyPid(options_.proc_root, static_cast<uint32_t>(pid), &who)) lp = FindInLedger(ledger_, who.pid_ns, who.pid, pid);
  ProcessInfo info = lp.found ? lp.info : ProcessInfo{pid, "", "", 0, false};
  manager_->Adopt(info);
}

Outcome SuspendService::Suspend(int pid) {
  std::lock_guard<std::mutex> lock(tick_mu_);
  TrackFromLedger(pid);
  return manager_->Suspend(pid, Cause::kManual);
}

Outcome SuspendService::Resume(int pid) {
  std::lock_guard<std::mutex> lock(tick_mu_);
  TrackFromLedger(pid);
  return manager_->Resume(pid);
}

Outcome SuspendService::Move(int pid, const GpuInfo& from, const GpuInfo& to) {
  std::lock_guard<std::mutex> lock(tick_mu_);
  TrackFromLedger(pid);
  return controller_->Move(pid, from, to);
}

std::vector<Outcome> SuspendService::SuspendPids(const std::vector<int>& pids) {
  std::lock_guard<std::mutex> lock(tick_mu_);
  std::vector<Outcome> outs;
  std::vector<int> done;
  for (int pid : pids) {
    TrackFromLedger(pid);
    Outcome o = manager_->Suspend(pid, Cause::kManual);
    outs.push_back(o);
    if (o.ok) {
      done.push_back(pid);
    } else if (!o.exited) {
      for (int back : done) outs.push_back(manager_->Resume(back));
      break;
    }
  }
  return outs;
}

std::vector<Outcome> SuspendService::ResumePids(const std::vector<int>& pids) {
  std::lock_guard<std::mutex> lock(tick_mu_);
  std::vector<Outcome> outs;
  for (int pid : pids) {
    TrackFromLedger(pid);
    outs.push_back(manager_->Resume(pid));
  }
  return outs;
}

}  // namespace gslice::suspend
