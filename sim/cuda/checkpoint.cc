// The process checkpoint API (cuCheckpointProcess*). Another process names the target by
// pid; the request travels through the target's mailbox in the node and a service thread
// of the target carries it out.
//
// Checkpoint in the sim: device memory already is host memory, so "moving it to host" is
// releasing its device capacity and making its addresses inaccessible (PROT_NONE); restore
// charges the capacity again (possibly on another device) and makes the same addresses
// accessible with their contents intact.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "driver.h"

using namespace gslice::sim;

namespace {

bool EnvSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

bool AllZero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

Checkpoint State(ProcessSlot& s) { return static_cast<Checkpoint>(s.process_state.load()); }
void SetState(ProcessSlot& s, Checkpoint c) { s.process_state.store(static_cast<uint32_t>(c)); }

bool AllStreamsIdle(Driver* d) {
  std::vector<CUctx_st*> ctxs;
  {
    std::lock_guard<std::mutex> g(d->mu);
    ctxs.assign(d->contexts.begin(), d->contexts.end());
  }
  for (CUctx_st* ctx : ctxs) {
    std::lock_guard<std::mutex> g(ctx->m);
    if (ctx->legacy && !ctx->legacy->Done(ctx->legacy->submitted())) return false;
    for (auto& s : ctx->streams) {
      if (!s->Done(s->submitted())) return false;
    }
    for (auto& [tid, s] : ctx->per_thread) {
      if (!s->Done(s->submitted())) return false;
    }
  }
  return true;
}

CUresult DoLock(Driver* d, ProcessSlot& slot, uint32_t timeout_ms) {
  if (State(slot) != Checkpoint::kRunning) return CUDA_ERROR_ILLEGAL_STATE;
  {
    std::lock_guard<std::mutex> g(d->gate_m);
    d->locked = true;
  }
  const uint64_t deadline = timeout_ms == 0 ? UINT64_MAX : static_cast<uint64_t>(gslice::MonotonicNs()) + timeout_ms * 1'000'000ull;
  for (;;) {
    bool quiet;
    {
      std::lock_guard<std::mutex> g(d->gate_m);
      quiet = d->in_flight == 0;
    }
    if (quiet && AllStreamsIdle(d)) break;
    if (static_cast<uint64_t>(gslice::MonotonicNs()) >= deadline) {
      {
        std::lock_guard<std::mutex> g(d->gate_m);
        d->locked = false;
      }
      d->gate_cv.notify_all();
      return CUDA_ERROR_NOT_READY;  // what the driver answers when the lock times out
    }
    usleep(1000);
  }
  SetState(slot, Checkpoint::kLocked);
  return CUDA_SUCCESS;
}

// Device bytes this process holds per physical device. REQUIRES: d->mu held.
void HeldBytesLocked(Driver* d, uint64_t out[kMaxDevices]) {
  for (uint32_t i = 0; i < kMaxDevices; ++i) out[i] = 0;
  for (auto& [base, a] : d->allocations) out[a.device] += a.charged;
  for (auto& [id, p] : d->physical) out[p.device] += p.charged;
}

// Sets the protection of every device allocation and VMM mapping. REQUIRES: d->mu held.
void ProtectDeviceMemoryLocked(Driver* d, bool accessible) {
  for (auto& [base, a] : d->allocations) {
    if (a.charged > 0 && a.mapped > 0) {
      mprotect(reinterpret_cast<void*>(a.base), a.mapped, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
    }
  }
  for (auto& [base, m] : d->vmm_mappings) {
    if (m.accessible) {
      mprotect(reinterpret_cast<void*>(base), m.size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
    }
  }
}

CUresult DoCheckpoint(Driver* d, ProcessSlot& slot, bool fail) {
  if (State(slot) != Checkpoint::kLocked) return CUDA_ERROR_ILLEGAL_STATE;
  if (fail || EnvSet("GSLICE_SIM_FAIL_CHECKPOINT")) return CUDA_ERROR_UNKNOWN;  // nothing moved
  uint64_t held[kMaxDevices];
  {
    std::lock_guard<std::mutex> g(d->mu);
    HeldBytesLocked(d, held);
    ProtectDeviceMemoryLocked(d, false);
    d->checkpointed = true;
  }
  for (uint32_t dev = 0; dev < kMaxDevices; ++dev) {
    if (held[dev] > 0) d->node->Uncharge(d->slot, dev, held[dev]);
    slot.contexts[dev].store(0);  // the process no longer holds the GPU
  }
  SetState(slot, Checkpoint::kCheckpointed);
  return CUDA_SUCCESS;
}

CUresult DoRestore(Driver* d, ProcessSlot& slot, const MailboxRequest& req) {
  if (State(slot) != Checkpoint::kCheckpointed) return CUDA_ERROR_ILLEGAL_STATE;
  // old physical device -> new physical device
  uint32_t remap[kMaxDevices];
  for (uint32_t i = 0; i < kMaxDevices; ++i) remap[i] = i;
  Node* node = d->node;
  for (uint32_t p = 0; p < req.gpu_pair_count; ++p) {
    int from = -1, to = -1;
    for (uint32_t i = 0; i < node->device_count(); ++i) {
      if (std::memcmp(node->device(i).uuid, req.gpu_pairs[p][0], 16) == 0) from = static_cast<int>(i);
      if (std::memcmp(node->device(i).uuid, req.gpu_pairs[p][1], 16) == 0) to = static_cast<int>(i);
    }
    if (from < 0 || to < 0) return CUDA_ERROR_INVALID_VALUE;
    remap[from] = static_cast<uint32_t>(to);
  }
  if (req.fail || EnvSet("GSLICE_SIM_FAIL_RESTORE")) return CUDA_ERROR_UNKNOWN;
  uint64_t held[kMaxDevices], need[kMaxDevices] = {};
  std::vector<uint32_t> ctx_devices;
  {
    std::lock_guard<std::mutex> g(d->mu);
    HeldBytesLocked(d, held);
    for (CUctx_st* c : d->contexts) ctx_devices.push_back(c->device);
  }
  for (uint32_t dev = 0; dev < kMaxDevices; ++dev) need[remap[dev]] += held[dev];
  if (!node->ChargeAll(d->slot, need)) return CUDA_ERROR_OUT_OF_MEMORY;  // still checkpointed
  {
    std::lock_guard<std::mutex> g(d->mu);
    for (auto& [base, a] : d->allocations) a.device = remap[a.device];
    for (auto& [id, p] : d->physical) p.device = remap[p.device];
    for (CUctx_st* c : d->contexts) c->device = remap[c->device];
    for (CUctx_st* c : d->primary) {
      if (c != nullptr) c->device = remap[c->device];
    }
    for (MemPool* p : d->pools) p->device = remap[p->device];
    for (uint32_t& v : d->visible) v = remap[v];
    ProtectDeviceMemoryLocked(d, true);
    d->checkpointed = false;
    for (CUctx_st* c : d->contexts) slot.contexts[c->device].fetch_add(1);
  }
  SetState(slot, Checkpoint::kLocked);
  return CUDA_SUCCESS;
}

CUresult DoUnlock(Driver* d, ProcessSlot& slot) {
  if (State(slot) != Checkpoint::kLocked) return CUDA_ERROR_ILLEGAL_STATE;
  SetState(slot, Checkpoint::kRunning);
  {
    std::lock_guard<std::mutex> g(d->gate_m);
    d->locked = false;
  }
  d->gate_cv.notify_all();
  return CUDA_SUCCESS;
}

CUresult Serve(Driver* d, ProcessSlot& slot, const MailboxRequest& req) {
  switch (req.op) {
    case MailboxOp::kLock: return DoLock(d, slot, req.timeout_ms);
    case MailboxOp::kCheckpoint: return DoCheckpoint(d, slot, req.fail != 0);
    case MailboxOp::kRestore: return DoRestore(d, slot, req);
    case MailboxOp::kUnlock: return DoUnlock(d, slot);
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// The node as a requester sees it; the requester need not have called cuInit.
Node* RequesterNode() {
  if (Driver* d = GetDriver()) return d->node;
  static std::mutex mu;
  static Node node;
  static bool open = false;
  std::lock_guard<std::mutex> g(mu);
  if (!open) {
    std::string error;
    open = Node::Open(&node, &error);
    if (!open) LogError("%s", error.c_str());
  }
  return open ? &node : nullptr;
}

CUresult Request(int pid, const MailboxRequest& req) {
  Node* node = RequesterNode();
  if (node == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  int index = node->FindSlot(pid);
  // The driver answers NOT_INITIALIZED for a pid that never initialised CUDA.
  if (index < 0) return CUDA_ERROR_NOT_INITIALIZED;
  ProcessSlot& s = node->slot(index);
  const ProcessId target{s.pid, s.start_time};
  if (s.service_tid.load() == 0) return CUDA_ERROR_NOT_INITIALIZED;  // not initialised yet
  // Take the mailbox; a requester that died holding it loses it.
  const int64_t me = getpid();
  for (;;) {
    int64_t owner = 0;
    if (s.mailbox_owner.compare_exchange_strong(owner, me)) break;
    ProcessId o;
    if (!ReadProcessId(static_cast<int32_t>(owner), &o) &&
        s.mailbox_owner.compare_exchange_strong(owner, me)) {
      break;
    }
    if (!ProcessAlive(target)) return CUDA_ERROR_NOT_FOUND;
    usleep(1000);
  }
  s.request = req;
  const uint32_t seq = s.request_seq.fetch_add(1) + 1;
  FutexWakeAll(&s.request_seq);
  CUresult result = CUDA_SUCCESS;
  for (;;) {
    uint32_t seen = s.response_seq.load();
    if (seen == seq) {
      result = static_cast<CUresult>(s.response.load());
      break;
    }
    if (!ProcessAlive(target)) {
      result = CUDA_ERROR_NOT_FOUND;
      break;
    }
    FutexWait(&s.response_seq, seen, 100'000'000);
  }
  s.mailbox_owner.store(0);
  return result;
}

}  // namespace

namespace gslice::sim {

void StartCheckpointService(Driver* d) {
  std::thread([d] {
    ProcessSlot& s = d->node->slot(d->slot);
    s.service_tid.store(static_cast<int32_t>(syscall(SYS_gettid)));
    for (;;) {
      uint32_t answered = s.response_seq.load();
      uint32_t asked = s.request_seq.load();
      if (asked == answered) {
        FutexWait(&s.request_seq, asked, 1'000'000'000);
        continue;
      }
      MailboxRequest req = s.request;
      CUresult r = Serve(d, s, req);
      s.response.store(r);
      s.response_seq.store(asked);
      FutexWakeAll(&s.response_seq);
    }
  }).detach();
}

}  // namespace gslice::sim

GSLICE_SIM_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  if (state == nullptr || pid == 0) return CUDA_ERROR_INVALID_VALUE;
  if (pid < 0) return CUDA_ERROR_OPERATING_SYSTEM;  // as the driver: no such process
  Node* node = RequesterNode();
  if (node == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  int index = node->FindSlot(pid);
  if (index < 0) return CUDA_ERROR_NOT_INITIALIZED;
  *state = static_cast<CUprocessState>(node->slot(index).process_state.load());
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  if (tid == nullptr || pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  Node* node = RequesterNode();
  if (node == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  int index = node->FindSlot(pid);
  if (index < 0 || node->slot(index).service_tid.load() == 0) return CUDA_ERROR_NOT_FOUND;
  *tid = node->slot(index).service_tid.load();
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  if (pid == 0) return CUDA_ERROR_INVALID_VALUE;
  if (pid < 0) return CUDA_ERROR_OPERATING_SYSTEM;  // as the driver: no such process
  MailboxRequest req{};
  req.op = MailboxOp::kLock;
  if (args != nullptr) {
    if (args->reserved0 != 0 || !AllZero(args->reserved1, sizeof args->reserved1)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    req.timeout_ms = args->timeoutMs;
  }
  return Request(pid, req);
}

GSLICE_SIM_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* args) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (args != nullptr && !AllZero(args->reserved, sizeof args->reserved)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  MailboxRequest req{};
  req.op = MailboxOp::kCheckpoint;
  req.fail = EnvSet("GSLICE_SIM_FAIL_CHECKPOINT") ? 1 : 0;
  return Request(pid, req);
}

GSLICE_SIM_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs* args) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  MailboxRequest req{};
  req.op = MailboxOp::kRestore;
  req.fail = EnvSet("GSLICE_SIM_FAIL_RESTORE") ? 1 : 0;
  if (args != nullptr) {
    if (!AllZero(args->reserved, sizeof args->reserved) || args->reserved1 != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (args->gpuPairsCount > 0 && args->gpuPairs == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (args->gpuPairsCount > kMaxGpuPairs) return CUDA_ERROR_INVALID_VALUE;
    req.gpu_pair_count = args->gpuPairsCount;
    for (unsigned i = 0; i < args->gpuPairsCount; ++i) {
      std::memcpy(req.gpu_pairs[i][0], args->gpuPairs[i].oldUuid.bytes, 16);
      std::memcpy(req.gpu_pairs[i][1], args->gpuPairs[i].newUuid.bytes, 16);
    }
  }
  return Request(pid, req);
}

GSLICE_SIM_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs* args) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (args != nullptr && !AllZero(args->reserved, sizeof args->reserved)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  MailboxRequest req{};
  req.op = MailboxOp::kUnlock;
  return Request(pid, req);
}
