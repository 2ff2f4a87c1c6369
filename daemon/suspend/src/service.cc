#include "gslice/suspend/service.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>

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
LedgerProcessInfo FindInLedger(const Ledger& ledger, uint64_t pid_ns, uint32_t pid, int host_pid) {
  LedgerProcessInfo out;
  LedgerLayout* l = ledger.layout();
  if (l == nullptr || pid == 0) return out;
  for (int i = 0; i < kLedgerMaxSlices; ++i) {
    LedgerSlice& s = l->slices[i];
    if (StateOf(s.state.load()) != EntryState::kReady) continue;
    const uint32_t hw = s.slot_high_water.load();
    for (uint32_t k = 0; k < hw && k < static_cast<uint32_t>(kLedgerMaxSlots); ++k) {
      const uint64_t word = s.slots[k].state.load();
      if (StateOf(word) != EntryState::kAlive || PidOf(word) != pid || s.slots[k].pid_ns.load() != pid_ns) continue;
      out.found = true;
      out.info.pid = host_pid;
      out.info.slice.assign(s.name, strnlen(s.name, sizeof s.name));
      out.info.opportunistic = s.slice_class == static_cast<uint32_t>(SliceClass::kOpportunistic);
      int64_t most = -1;
      for (int g = 0; g < kLedgerMaxGpus; ++g) {
        if (StateOf(s.gpus[g].state.load()) != EntryState::kReady) continue;
        const int64_t used = s.used[g][k].load();
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
    if (SuspendBoardEntry* e = service_->EntryOf(s.info.pid)) {
      if (s.state == State::kRunning || s.state == State::kFailed) {
        // Failed: the driver reports an error; let calls reach it and fail there rather
        // than hang at the gate.
        e->resume_request.store(0, std::memory_order_release);
        e->gate.store(kGateOpen, std::memory_order_release);
        FutexWakeAll(&e->gate);
      } else {
        e->gate.store(kGateClosed, std::memory_order_release);
      }
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
    *error = "cannot open the node ledger " + options_.ledger_path + ": " + LedgerErrorString(e);
    return false;
  }
  if (!board_.Open(options_.board_path.c_str())) {
    *error = "cannot open the suspend board " + options_.board_path + ": " + std::strerror(errno);
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
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      const uint32_t bell = board_.layout()->header.doorbell.load(std::memory_order_acquire);
      Tick();
      if (stop_.load()) break;
      FutexWait(&board_.layout()->header.doorbell, bell, options_.tick_ms);
    }
  });
}

void SuspendService::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  RingDoorbell(board_.layout());
  thread_.join();
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

int SuspendService::HostPid(const SuspendBoardEntry& e) {
  const uint64_t word = e.owner.load(std::memory_order_acquire);
  if (!BoardOwnerLive(word)) return 0;
  const uint32_t host = resolver_->Resolve(e.pid_ns.load(std::memory_order_acquire), BoardOwnerPid(word),
                                           e.start_time.load(std::memory_order_acquire));
  if (host == 0) return 0;
  std::lock_guard<std::mutex> lock(entries_mu_);
  entry_of_[static_cast<int>(host)] = const_cast<SuspendBoardEntry*>(&e);
  return static_cast<int>(host);
}

SuspendBoardEntry* SuspendService::EntryOf(int host_pid) {
  {
    std::lock_guard<std::mutex> lock(entries_mu_);
    auto it = entry_of_.find(host_pid);
    if (it != entry_of_.end()) {
      // Still that process's entry? (Reaped and reclaimed entries are looked up afresh.)
      PidIdentity who;
      SuspendBoardEntry* e = it->second;
      const uint64_t word = e->owner.load(std::memory_order_acquire);
      if (BoardOwnerLive(word) && IdentifyPid(options_.proc_root, static_cast<uint32_t>(host_pid), &who) &&
          who.pid == BoardOwnerPid(word) && who.pid_ns == e->pid_ns.load(std::memory_order_acquire)) {
        return e;
      }
      entry_of_.erase(it);
    }
  }
  PidIdentity who;
  if (!IdentifyPid(options_.proc_root, static_cast<uint32_t>(host_pid), &who)) return nullptr;
  SuspendBoardEntry* e = board_.Find(who.pid_ns, who.pid);
  if (e == nullptr || e->start_time.load(std::memory_order_acquire) != who.start_time) return nullptr;
  std::lock_guard<std::mutex> lock(entries_mu_);
  entry_of_[host_pid] = e;
  return e;
}

std::vector<ProcessSample> SuspendService::Sample() {
  std::vector<ProcessSample> samples;
  board_.Reap();
  for (SuspendBoardEntry& e : board_.layout()->entries) {
    const uint64_t owner = e.owner.load(std::memory_order_acquire);
    if (!BoardOwnerLive(owner)) continue;
    // The driver's checkpoint calls name processes as we see them: a process in a container
    // is known on the board by its container-local pid and mapped here. One we cannot see
    // (another pid namespace that is not nested in ours) cannot be suspended.
    const int pid = HostPid(e);
    if (pid == 0) continue;
    ProcessSample s;
    LedgerProcessInfo lp = FindInLedger(ledger_, e.pid_ns.load(std::memory_order_acquire), BoardOwnerPid(owner), pid);
    if (lp.found) {
      s.info = lp.info;
    } else {
      s.info.pid = pid;  // shimmed without a slice: no limits, no class
    }
    s.activity = e.activity.load(std::memory_order_relaxed);
    s.resume_requested = e.resume_request.load(std::memory_order_acquire) != 0;
    if (options_.idle_timeout_s && !s.info.slice.empty()) {
      s.idle_timeout_ns = options_.idle_timeout_s(s.info.slice) * 1'000'000'000LL;
    }
    samples.push_back(s);
  }
  return samples;
}

void SuspendService::AnswerMemoryRequests(int64_t now) {
  for (SuspendBoardEntry& e : board_.layout()->entries) {
    if (!BoardOwnerLive(e.owner.load(std::memory_order_acquire))) continue;
    const uint64_t seq = e.mem_request_seq.load(std::memory_order_acquire);
    if (seq == 0 || seq == e.mem_reply_seq.load(std::memory_order_acquire)) continue;
    const uint64_t bytes = e.mem_request_bytes.load(std::memory_order_relaxed);
    const std::string gpu = UuidText(e.mem_request_gpu);
    // The shim asks after the driver refused, so what NVML reports free (less a margin for
    // what the driver keeps back) is not enough; free the rest.
    const uint64_t free_now = FreeBytes(gpu);
    const uint64_t margin = options_.controller.resume_margin_bytes;
    PreemptResult r = controller_->Preempt(gpu, bytes, free_now > margin ? free_now - margin : 0, now);
    // The suspends just done may have taken longer than the quiet period: it starts now,
    // as the requester is told to retry, so its victims do not resume under its allocation.
    if (!r.outcomes.empty()) controller_->HoldResumes(gpu, MonotonicNs());
    if (!r.ok) {
      std::fprintf(stderr, "gslice suspend: pid %u needs %llu bytes on %s: %s\n",
                   BoardOwnerPid(e.owner.load()),
                   static_cast<unsigned long long>(bytes), gpu.c_str(), r.reason.c_str());
    }
    e.mem_reply.store(r.ok ? kMemReplyFreed : kMemReplyRefused, std::memory_order_release);
    e.mem_reply_seq.store(seq, std::memory_order_release);
    FutexWakeAll(&e.mem_reply);
  }
}

// `gslice move PID --to GPU`: suspend the process if it runs, restore it on the target
// through GPU pairs; if the move is refused, a process this request suspended is resumed
// where it was, so a refused move changes nothing.
void SuspendService::AnswerMoveRequests() {
  for (SuspendBoardEntry& e : board_.layout()->entries) {
    const uint64_t owner = e.owner.load(std::memory_order_acquire);
    if (!BoardOwnerLive(owner)) continue;
    const uint64_t seq = e.move_seq.load(std::memory_order_acquire);
    if (seq == 0 || seq == e.move_reply_seq.load(std::memory_order_acquire)) continue;
    const int pid = HostPid(e);
    const std::string to_uuid = UuidText(e.move_to_gpu);
    if (pid != 0) TrackFromLedger(pid);
    std::string why;
    bool moved = false;
    auto st = pid != 0 ? manager_->Get(pid) : std::nullopt;
    GpuInfo from, to;
    if (pid == 0) {
      why = "process " + std::to_string(BoardOwnerPid(owner)) + " of another pid namespace is not visible here";
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
    e.move_reply.store(moved ? kMoveReplyMoved : kMoveReplyRefused, std::memory_order_release);
    e.move_reply_seq.store(seq, std::memory_order_release);
    FutexWakeAll(&e.move_reply);
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
