// Initialisation, devices, contexts, streams, events and the per-context engine.
#include "driver.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

#include <chrono>
#include <thread>
#include <type_traits>
#include <algorithm>
#include <cstdarg>
#include <new>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gslice::sim {
namespace {

std::mutex g_init_mu;
// Written under g_init_mu, read without it on every entry point.
std::atomic<Driver*> g_driver{nullptr};
std::atomic<int> g_init_result{CUDA_ERROR_NOT_INITIALIZED};
thread_local std::vector<CUctx_st*> tls_stack;

std::string TrimSpaces(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// CUDA_VISIBLE_DEVICES as the driver reads it: indices or (prefixes of) UUIDs, in order;
// the list ends at the first entry that names no device or repeats one.
std::vector<uint32_t> VisibleDevices(Node* node) {
  std::vector<uint32_t> out;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  uint32_t count = node->device_count();
  if (env == nullptr) {
    for (uint32_t i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::string list = env;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string tok = TrimSpaces(list.substr(pos, comma == std::string::npos ? std::string::npos
                                                                              : comma - pos));
    int found = -1;
    if (tok.rfind("GPU-", 0) == 0) {
      for (uint32_t i = 0; i < count; ++i) {
        if (std::strncmp(node->device(i).uuid_text, tok.c_str(), tok.size()) == 0) {
          if (found >= 0) {
            found = -2;  // ambiguous prefix
            break;
          }
          found = static_cast<int>(i);
        }
      }
    } else if (!tok.empty() && tok.find_first_not_of("0123456789") == std::string::npos &&
               tok.size() < 6) {
      unsigned long v = std::strtoul(tok.c_str(), nullptr, 10);
      if (v < count) found = static_cast<int>(v);
    }
    if (found < 0) break;
    bool dup = false;
    for (uint32_t v : out) dup = dup || v == static_cast<uint32_t>(found);
    if (dup) break;
    out.push_back(static_cast<uint32_t>(found));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void SleepNs(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ull), static_cast<long>(ns % 1'000'000'000ull)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// A child of fork() starts with no driver: it may call cuInit and becomes a process of
// its own on the node (the parent's streams, contexts and slot stay the parent's).
void ForkPrepare() { g_init_mu.lock(); }
void ForkParent() { g_init_mu.unlock(); }
std::mutex g_user_streams_mu;
std::map<CUstream_st*, std::shared_ptr<CUstream_st>> g_user_streams;
std::mutex g_events_mu;
std::map<CUevent_st*, std::shared_ptr<CUevent_st>> g_events;
// Events that went with their context (as on a GPU). Kept, so that their addresses are not
// reused and a later use is told apart from a bad handle: the real driver may crash or
// corrupt its heap there, so the sim says so on stderr (tests look for the line).
std::map<CUevent_st*, std::shared_ptr<CUevent_st>> g_dead_events;

// g_events_mu held: reports e if it went with its context.
bool ReportDeadEventLocked(CUevent e) {
  if (g_dead_events.count(e) == 0) return false;
  fprintf(stderr, "gslice sim: event %p used after its context was destroyed\n", static_cast<void*>(e));
  return true;
}

void ForkChild() {
  new (&g_init_mu) std::mutex();
  new (&g_user_streams_mu) std::mutex();
  new (&g_events_mu) std::mutex();
  ResetKernelLocksAfterFork();
  ResetMemoryLocksAfterFork();
  g_driver = nullptr;
  g_init_result = CUDA_ERROR_NOT_INITIALIZED;
  tls_stack.clear();
}

}  // namespace

void LogError(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "gslice sim: %s\n", buf);
}

Driver* GetDriver() { return g_driver.load(std::memory_order_acquire); }

CUresult InitResult() { return static_cast<CUresult>(g_init_result.load(std::memory_order_acquire)); }

CUctx_st* CurrentContext() { return tls_stack.empty() ? nullptr : tls_stack.back(); }

bool ContextLive(CUctx_st* ctx) {
  Driver* d = GetDriver();
  if (d == nullptr || ctx == nullptr) return false;
  std::lock_guard<std::mutex> g(d->mu);
  return d->contexts.count(ctx) != 0 && ctx->live.load();
}

ApiGate::ApiGate() : driver_(GetDriver()) {
  if (driver_ == nullptr) return;
  std::unique_lock<std::mutex> l(driver_->gate_m);
  driver_->gate_cv.wait(l, [&] { return !driver_->locked; });
  ++driver_->in_flight;
}

ApiGate::~ApiGate() {
  if (driver_ == nullptr) return;
  {
    std::lock_guard<std::mutex> g(driver_->gate_m);
    --driver_->in_flight;
  }
  driver_->gate_cv.notify_all();
}

// ---- streams ----

}  // namespace gslice::sim

using namespace gslice::sim;

uint64_t CUstream_st::Submit(Op op) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> g(m);
    seq = ++next_seq;
    queue.push_back(std::move(op));
    if (!worker_started) {
      worker_started = true;
      std::thread([self = shared_from_this()] { self->WorkerLoop(); }).detach();
    }
  }
  cv.notify_all();
  return seq;
}

uint64_t CUstream_st::submitted() {
  std::lock_guard<std::mutex> g(m);
  return next_seq;
}

void CUstream_st::WaitFor(uint64_t seq) {
  std::unique_lock<std::mutex> l(m);
  cv.wait(l, [&] { return completed.load() >= seq; });
}

void CUstream_st::Retire() {
  {
    std::lock_guard<std::mutex> g(m);
    retiring = true;
  }
  cv.notify_all();
}

void CUstream_st::WorkerLoop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> l(m);
      cv.wait(l, [&] { return !queue.empty() || retiring; });
      if (queue.empty()) return;
      op = std::move(queue.front());
      queue.pop_front();
    }
    for (const Dep& dep : op.deps) {
      if (dep.stream && dep.seq > 0) dep.stream->WaitFor(dep.seq);
    }
    if (op.run) op.run();
    {
      std::lock_guard<std::mutex> g(m);
      completed.fetch_add(1);
    }
    cv.notify_all();
  }
}

namespace gslice::sim {

namespace {

std::shared_ptr<CUstream_st> NewStream(CUctx_st* ctx, StreamKind kind, unsigned flags,
                                       int priority) {
  auto s = std::make_shared<CUstream_st>();
  s->ctx = ctx;
  s->kind = kind;
  s->flags = flags;
  s->priority = priority;
  Driver* d = GetDriver();
  s->id = d->next_stream_id.fetch_add(1);
  return s;
}

std::shared_ptr<CUstream_st> PerThreadStream(CUctx_st* ctx) {
  std::lock_guard<std::mutex> g(ctx->m);
  auto& s = ctx->per_thread[std::this_thread::get_id()];
  if (!s) s = NewStream(ctx, StreamKind::kPerThread, 0, 0);
  return s;
}

}  // namespace

CUresult ResolveStream(CUstream h, bool per_thread_default, std::shared_ptr<CUstream_st>* out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    CUctx_st* ctx = CurrentContext();
    if (ctx == nullptr || !ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    bool pt = h == CU_STREAM_PER_THREAD || (h == nullptr && per_thread_default);
    if (pt) {
      *out = PerThreadStream(ctx);
    } else {
      std::lock_guard<std::mutex> g(ctx->m);
      *out = ctx->legacy;
    }
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> g(g_user_streams_mu);
  auto it = g_user_streams.find(h);
  if (it == g_user_streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

uint64_t Enqueue(const std::shared_ptr<CUstream_st>& s, std::function<void()> run,
                 std::vector<Dep> deps) {
  CUctx_st* ctx = s->ctx;
  std::lock_guard<std::mutex> g(ctx->m);
  if (s->capture) {
    if (run) CaptureOp(s->capture.get(), std::move(run));
    return s->submitted();
  }
  if (s->kind == StreamKind::kLegacy) {
    // The legacy default stream waits for all prior work of the blocking streams.
    for (auto& u : ctx->streams) {
      if ((u->flags & CU_STREAM_NON_BLOCKING) == 0) deps.push_back({u, u->submitted()});
    }
    for (auto& [tid, u] : ctx->per_thread) deps.push_back({u, u->submitted()});
  } else if ((s->flags & CU_STREAM_NON_BLOCKING) == 0) {
    // ... and blocking streams wait for prior work of the legacy stream.
    deps.push_back({ctx->legacy, ctx->legacy->submitted()});
  }
  return s->Submit(Op{std::move(run), std::move(deps)});
}

void SynchronizeContext(CUctx_st* ctx) {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> targets;
  {
    std::lock_guard<std::mutex> g(ctx->m);
    if (ctx->legacy) targets.push_back({ctx->legacy, ctx->legacy->submitted()});
    for (auto& u : ctx->streams) targets.push_back({u, u->submitted()});
    for (auto& [tid, u] : ctx->per_thread) targets.push_back({u, u->submitted()});
  }
  for (auto& [s, seq] : targets) s->WaitFor(seq);
}

namespace {

// Waits (engine_m held through l) until this kernel is the context's next: highest priority
// first, then arrival order; then marks the engine busy.
void TakeEngine(CUctx_st* ctx, int priority, std::unique_lock<std::mutex>& l) {
  const std::pair<int, uint64_t> key{priority, ctx->engine_ticket++};
  ctx->engine_waiting.insert(key);
  ctx->engine_cv.wait(l, [&] { return !ctx->engine_busy && *ctx->engine_waiting.begin() == key; });
  ctx->engine_waiting.erase(key);
  ctx->engine_busy = true;
}

// Under MPS (GSLICE_SIM_MPS): the context runs its kernel without taking the device from
// other processes; each other process running at the same time stretches every chunk by
// the node's interference percent, and a context limited to a share of the SMs
// (CUctx_st::sm_percent) takes that much longer. Streams of one context still run one at a
// time.
uint64_t RunConcurrently(CUctx_st* ctx, int priority, uint64_t duration_ns, const std::function<void()>& body) {
  Driver* d = GetDriver();
  Node* node = d->node;
  constexpr uint64_t kChunkNs = 500'000;
  std::unique_lock<std::mutex> l(ctx->engine_m);
  TakeEngine(ctx, priority, l);
  l.unlock();
  const uint32_t dev = ctx->device;
  std::atomic<uint64_t>& running = node->slot(d->slot).mps_running_until_ns[dev];
  uint64_t remaining = duration_ns;
  const uint64_t first_start = MonotonicNs();
  do {
    const uint64_t start = MonotonicNs();
    const uint64_t chunk = remaining < kChunkNs ? remaining : kChunkNs;
    const uint64_t others = node->MpsOthersRunning(d->slot, dev, start);
    const uint64_t stretched = chunk * (100 + node->mps_interference_pct() * others) / ctx->sm_percent;
    running.store(start + stretched, std::memory_order_relaxed);
    if (stretched > 0) SleepNs(stretched);
    remaining -= chunk;
    node->AddBusy(d->slot, dev, MonotonicNs() - start);
  } while (remaining > 0);
  running.store(0, std::memory_order_relaxed);
  if (body) body();
  l.lock();
  ctx->engine_busy = false;
  l.unlock();
  ctx->engine_cv.notify_all();
  return first_start;
}

}  // namespace

uint64_t RunOnDevice(CUctx_st* ctx, int priority, uint64_t duration_ns,
                     const std::function<void()>& body) {
  Driver* d = GetDriver();
  Node* node = d->node;
  if (node->mps()) return RunConcurrently(ctx, priority, duration_ns, body);
  uint64_t first_start = 0;
  const uint64_t code = node->MakeContextCode(d->slot, ctx->serial);
  const uint64_t slice = static_cast<uint64_t>(node->timeslice_us()) * 1000;
  uint64_t remaining = duration_ns;
  bool first = true;
  while (first || remaining > 0) {
    first = false;
    std::unique_lock<std::mutex> l(ctx->engine_m);
    TakeEngine(ctx, priority, l);
    const uint32_t dev = ctx->device;
    bool held = ctx->holds_device;
    l.unlock();
    if (held && !node->KeepDevice(dev, code)) held = false;  // taken from us while stalled
    if (!held) node->AcquireDevice(dev, code);

    const uint64_t start = MonotonicNs();
    if (first_start == 0) first_start = start;
    const uint64_t chunk = remaining < slice ? remaining : slice;
    if (chunk > 0) SleepNs(chunk);
    remaining -= chunk;
    if (remaining == 0 && body) body();
    node->AddBusy(d->slot, dev, MonotonicNs() - start);

    l.lock();
    ctx->engine_busy = false;
    bool release = node->OthersWaiting(dev) || (ctx->engine_waiting.empty() && remaining == 0);
    if (release) {
      node->ReleaseDevice(dev, code);
      ctx->holds_device = false;
    } else {
      ctx->holds_device = true;
    }
    l.unlock();
    ctx->engine_cv.notify_all();
  }
  return first_start;
}

}  // namespace gslice::sim

// ---------------------------------------------------------------------------------------
// Exported entry points.

GSLICE_SIM_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(g_init_mu);
  if (g_driver.load() != nullptr) return CUDA_SUCCESS;
  if (g_init_result.load() != CUDA_ERROR_NOT_INITIALIZED) return InitResult();  // failures stick
  std::string error;
  auto d = std::make_unique<Driver>();
  if (!Node::Open(d->node, &error)) {
    LogError("%s", error.c_str());
    g_init_result = CUDA_ERROR_OPERATING_SYSTEM;
    return InitResult();
  }
  d->visible = VisibleDevices(d->node);
  if (d->visible.empty()) {
    g_init_result = CUDA_ERROR_NO_DEVICE;
    return InitResult();
  }
  d->slot = d->node->ClaimSlot();
  if (d->slot < 0) {
    LogError("the simulated node has no free process slot (%u processes)", kMaxProcesses);
    g_init_result = CUDA_ERROR_OPERATING_SYSTEM;
    return InitResult();
  }
  d->primary.assign(d->visible.size(), nullptr);
  d->default_pool.assign(d->visible.size(), nullptr);
  d->current_pool.assign(d->visible.size(), nullptr);
  Driver* driver = d.release();
  g_driver.store(driver, std::memory_order_release);
  g_init_result = CUDA_SUCCESS;
  static bool fork_handlers = false;
  if (!fork_handlers) {
    pthread_atfork(ForkPrepare, ForkParent, ForkChild);
    fork_handlers = true;
  }
  StartCheckpointService(driver);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  *count = static_cast<int>(d->visible.size());
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (ordinal < 0 || ordinal >= static_cast<int>(d->visible.size())) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *device = ordinal;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  std::snprintf(name, static_cast<size_t>(len), "%s", d->node->device(d->visible[dev]).name);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  std::memcpy(uuid->bytes, d->node->device(d->visible[dev]).uuid, 16);
  return CUDA_SUCCESS;
}

#undef cuDeviceGetUuid
GSLICE_SIM_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

GSLICE_SIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  *bytes = d->node->device(d->visible[dev]).total_memory;
  return CUDA_SUCCESS;
}

namespace gslice::sim {

// A client's share of the SMs under MPS, as the driver reads it when the process connects:
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, a percentage 1..100 (anything else: all of them).
uint32_t MpsSmPercent(const Driver* d) {
  if (!d->node->mps()) return 100;
  const char* v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  if (v == nullptr || *v == '\0') return 100;
  char* end = nullptr;
  const double pct = strtod(v, &end);
  if (end == v || *end != '\0' || !(pct >= 1 && pct <= 100)) return 100;
  return static_cast<uint32_t>(pct);
}

}  // namespace gslice::sim

GSLICE_SIM_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  const DeviceRecord& rec = d->node->device(d->visible[dev]);
  int v = 0;
  // H100/H200-like values; attributes not listed read 0 (feature absent).
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 52428800; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = 32; break;
    // An MPS client limited to a share of the SMs is told its share, as the driver does (seen
    // on an H200: 66 of 132 at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50).
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      v = static_cast<int>(std::max<uint32_t>(1, rec.sm_count * gslice::sim::MpsSmPercent(d) / 100));
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = static_cast<int>(rec.pci_bus); break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 3; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = d->node->mps() ? 1 : 0; break;
    default: v = 0; break;
  }
  *pi = v;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  if (bus_id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:%02x:00.0",
                d->node->device(d->visible[dev]).pci_bus);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* bus_id) {
  if (dev == nullptr || bus_id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < d->visible.size(); ++i) {
    if (domain == 0 && device == 0 && d->node->device(d->visible[i]).pci_bus == bus) {
      *dev = static_cast<CUdevice>(i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

// ---- contexts ----

namespace gslice::sim {
namespace {

CUctx_st* NewContext(Driver* d, int ordinal, unsigned flags, bool primary) {
  auto* ctx = new CUctx_st;
  ctx->ordinal = static_cast<uint32_t>(ordinal);
  ctx->device = d->visible[ordinal];
  ctx->flags = flags;
  ctx->primary = primary;
  ctx->sm_percent = MpsSmPercent(d);
  return ctx;
}

// Makes ctx usable: a legacy stream, a serial for the device scheduler, a context on the
// node's books. REQUIRES: d->mu held.
void ActivateLocked(Driver* d, CUctx_st* ctx) {
  ctx->serial = d->next_serial++;
  ctx->id = ctx->serial;
  ctx->legacy = NewStream(ctx, StreamKind::kLegacy, 0, 0);
  ctx->sticky_error.store(CUDA_SUCCESS);
  ctx->live.store(true);
  d->contexts.insert(ctx);
  d->node->slot(d->slot).contexts[ctx->device].fetch_add(1);
}

void RemoveFromStacks(CUctx_st* ctx) {
  // Only the calling thread's stack is reachable; other threads find the context dead.
  for (auto it = tls_stack.begin(); it != tls_stack.end();) {
    it = *it == ctx ? tls_stack.erase(it) : it + 1;
  }
}

}  // namespace

void DestroyContextResources(CUctx_st* ctx) {
  Driver* d = GetDriver();
  std::vector<std::shared_ptr<CUstream_st>> streams;
  {
    std::lock_guard<std::mutex> g(ctx->m);
    streams = ctx->streams;
    if (ctx->legacy) streams.push_back(ctx->legacy);
    for (auto& [tid, s] : ctx->per_thread) streams.push_back(s);
    ctx->streams.clear();
    ctx->per_thread.clear();
    ctx->legacy.reset();
  }
  for (auto& s : streams) s->Retire();
  {
    std::lock_guard<std::mutex> g(g_user_streams_mu);
    for (auto it = g_user_streams.begin(); it != g_user_streams.end();) {
      it = it->second->ctx == ctx ? g_user_streams.erase(it) : std::next(it);
    }
  }
  {
    std::lock_guard<std::mutex> g(g_events_mu);
    for (auto it = g_events.begin(); it != g_events.end();) {
      if (it->second->ctx != ctx) {
        ++it;
        continue;
      }
      g_dead_events.insert(*it);
      it = g_events.erase(it);
    }
  }
  std::vector<std::pair<uint32_t, size_t>> uncharge;
  {
    std::lock_guard<std::mutex> g(d->mu);
    ctx->live.store(false);
    if (d->contexts.erase(ctx) != 0 && !ctx->primary) d->retired_contexts.emplace_back(ctx);
    for (auto it = d->allocations.begin(); it != d->allocations.end();) {
      Allocation& a = it->second;
      if (a.ctx != ctx || a.kind == AllocKind::kVmmMapping) {
        ++it;
        continue;
      }
      if (a.charged > 0 && !d->checkpointed) uncharge.push_back({a.device, a.charged});
      if (a.mapped > 0) munmap(reinterpret_cast<void*>(a.base), a.mapped);
      it = d->allocations.erase(it);
    }
    for (MemPool* p : d->pools) {
      if (p->device == ctx->device) {
        p->cached.clear();
        p->used_current = p->reserved_current = 0;
      }
    }
  }
  for (auto& [dev, bytes] : uncharge) d->node->Uncharge(d->slot, dev, bytes);
  std::atomic<uint32_t>& n = d->node->slot(d->slot).contexts[ctx->device];
  if (n.load() > 0) n.fetch_sub(1);
}

}  // namespace gslice::sim

namespace {
CUresult CreateContext(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  if ((flags & ~0xFFu) != 0 || (flags & CU_CTX_SCHED_MASK) > CU_CTX_SCHED_BLOCKING_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiGate gate;
  CUctx_st* ctx = NewContext(d, dev, flags, false);
  {
    std::lock_guard<std::mutex> g(d->mu);
    ActivateLocked(d, ctx);
  }
  tls_stack.push_back(ctx);
  *pctx = ctx;
  return CUDA_SUCCESS;
}
}  // namespace

GSLICE_SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}

// The first cuCtxCreate, which the driver still resolves for versions before 3.2; cuda.h maps
// the name to the newest version, so the symbol is named through asm.
GSLICE_SIM_EXPORT CUresult gslice_sim_cuCtxCreate_v1(CUcontext* pctx, unsigned int flags,
                                                     CUdevice dev) __asm__("cuCtxCreate");
GSLICE_SIM_EXPORT CUresult gslice_sim_cuCtxCreate_v1(CUcontext* pctx, unsigned int flags,
                                                     CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}

GSLICE_SIM_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params,
                                          int num_params, unsigned int flags, CUdevice dev) {
  if (num_params < 0 || (num_params > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (num_params > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  return CreateContext(pctx, flags, dev);
}

GSLICE_SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params,
                                          unsigned int flags, CUdevice dev) {
  if (params != nullptr) {
    if (params->numExecAffinityParams > 0 && params->cigParams != nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (params->numExecAffinityParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    if (params->cigParams != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CreateContext(pctx, flags, dev);
}

GSLICE_SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  REQUIRE_INIT(d);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ContextLive(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  ApiGate gate;
  SynchronizeContext(ctx);
  DestroyContextResources(ctx);
  RemoveFromStacks(ctx);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  REQUIRE_INIT(d);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  tls_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  REQUIRE_INIT(d);
  if (tls_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = tls_stack.back();
  tls_stack.pop_back();
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  REQUIRE_INIT(d);
  if (ctx == nullptr) {
    if (!tls_stack.empty()) tls_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls_stack.empty()) {
    tls_stack.push_back(ctx);
  } else {
    tls_stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  *pctx = CurrentContext();
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  *device = static_cast<CUdevice>(ctx->ordinal);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (ctx == nullptr) ctx = CurrentContext();
  if (ctx == nullptr || !ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctx->id;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (ctx == nullptr) ctx = CurrentContext();
  if (ctx == nullptr || !ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 12010;  // what the driver reports for contexts of CUDA 12+ applications
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxSynchronize(void) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  ApiGate gate;
  SynchronizeContext(ctx);
  TrimPoolsToThreshold();
  return static_cast<CUresult>(ctx->sticky_error.load());
}

// The SMs the current context may use: the device's, or under MPS its client's share of them
// (the same count as CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT then gives, as on the driver).
GSLICE_SIM_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam* param, CUexecAffinityType type) {
  if (param == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  const uint32_t sms = d->node->device(ctx->device).sm_count;
  param->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  param->param.smCount.val = std::max<uint32_t>(1, sms * ctx->sm_percent / 100);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  if (least != nullptr) *least = kLeastStreamPriority;
  if (greatest != nullptr) *greatest = kGreatestStreamPriority;
  return CUDA_SUCCESS;
}

// ---- primary contexts ----

GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  ApiGate gate;
  std::lock_guard<std::mutex> g(d->mu);
  CUctx_st*& p = d->primary[dev];
  if (p == nullptr) p = NewContext(d, dev, 0, true);
  if (p->primary_refs == 0) ActivateLocked(d, p);
  ++p->primary_refs;
  *pctx = p;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  CUctx_st* p;
  {
    std::lock_guard<std::mutex> g(d->mu);
    p = d->primary[dev];
    if (p == nullptr || p->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--p->primary_refs > 0) return CUDA_SUCCESS;
  }
  ApiGate gate;
  SynchronizeContext(p);
  DestroyContextResources(p);
  RemoveFromStacks(p);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  CUctx_st* p;
  {
    std::lock_guard<std::mutex> g(d->mu);
    p = d->primary[dev];
    if (p == nullptr || p->primary_refs == 0) return CUDA_SUCCESS;
  }
  ApiGate gate;
  SynchronizeContext(p);
  DestroyContextResources(p);
  std::lock_guard<std::mutex> g(d->mu);
  p->primary_refs = 0;
  p->flags = 0;
  return CUDA_SUCCESS;
}

// The pre-11.0 names; same behaviour in the sim.
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}
GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return cuDevicePrimaryCtxReset_v2(dev);
}

GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags,
                                                      int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  std::lock_guard<std::mutex> g(d->mu);
  CUctx_st* p = d->primary[dev];
  *flags = p != nullptr ? p->flags : 0;
  *active = (p != nullptr && p->primary_refs > 0) ? 1 : 0;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, dev);
  if ((flags & ~0xFFu) != 0 || (flags & CU_CTX_SCHED_MASK) > CU_CTX_SCHED_BLOCKING_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> g(d->mu);
  CUctx_st*& p = d->primary[dev];
  if (p == nullptr) p = NewContext(d, dev, 0, true);
  p->flags = flags;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

// ---- streams ----

namespace {
CUresult CreateStream(CUstream* ph, unsigned int flags, int priority) {
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if ((flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  REQUIRE_CONTEXT(ctx);
  ApiGate gate;
  // Out-of-range priorities are clamped, as the driver does.
  if (priority > kLeastStreamPriority) priority = kLeastStreamPriority;
  if (priority < kGreatestStreamPriority) priority = kGreatestStreamPriority;
  auto s = NewStream(ctx, StreamKind::kUser, flags, priority);
  {
    std::lock_guard<std::mutex> g(ctx->m);
    ctx->streams.push_back(s);
  }
  {
    std::lock_guard<std::mutex> g(g_user_streams_mu);
    g_user_streams[s.get()] = s;
  }
  *ph = s.get();
  return CUDA_SUCCESS;
}
}  // namespace

GSLICE_SIM_EXPORT CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  return CreateStream(ph, flags, 0);
}

GSLICE_SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags,
                                                      int priority) {
  return CreateStream(ph, flags, priority);
}

GSLICE_SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream h) {
  REQUIRE_INIT(d);
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  std::shared_ptr<CUstream_st> s;
  {
    std::lock_guard<std::mutex> g(g_user_streams_mu);
    auto it = g_user_streams.find(h);
    if (it == g_user_streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    s = it->second;
    g_user_streams.erase(it);
  }
  {
    std::lock_guard<std::mutex> g(s->ctx->m);
    auto& v = s->ctx->streams;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == s) {
        v.erase(it);
        break;
      }
    }
  }
  // Work already queued still runs; the stream goes away when it is done.
  s->Retire();
  return CUDA_SUCCESS;
}

#define STREAM_ENTRY(name, suffix_pt, params, call) \
  GSLICE_SIM_EXPORT CUresult name params { return call(false); } \
  GSLICE_SIM_EXPORT CUresult name##suffix_pt params { return call(true); }

namespace {
CUresult StreamSynchronize(CUstream h, bool pt) {
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  s->WaitFor(s->submitted());
  TrimPoolsToThreshold();
  return static_cast<CUresult>(s->ctx->sticky_error.load());
}

CUresult StreamQuery(CUstream h, bool pt) {
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  return s->Done(s->submitted()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// The stream getters: validate the output, resolve the stream, read one field.
template <typename T, typename Read>
CUresult StreamField(CUstream h, T* out, bool pt, Read read) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  *out = read(*s);
  return CUDA_SUCCESS;
}

CUresult StreamGetPriority(CUstream h, int* priority, bool pt) {
  return StreamField(h, priority, pt, [](const CUstream_st& s) { return s.priority.load(); });
}

// Stream attributes: the priority alone (the device's range, clamped as at creation, also
// for the default streams); the others are not simulated.
CUresult StreamSetAttribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue* value, bool pt) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if (attr != CU_STREAM_ATTRIBUTE_PRIORITY) return CUDA_ERROR_NOT_SUPPORTED;
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  s->priority.store(std::clamp(value->priority, kGreatestStreamPriority, kLeastStreamPriority));
  return CUDA_SUCCESS;
}

CUresult StreamGetAttribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* value, bool pt) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attr != CU_STREAM_ATTRIBUTE_PRIORITY) return CUDA_ERROR_NOT_SUPPORTED;
  return StreamGetPriority(h, &value->priority, pt);
}

CUresult StreamGetFlags(CUstream h, unsigned* flags, bool pt) {
  return StreamField(h, flags, pt, [](const CUstream_st& s) { return s.flags; });
}

CUresult StreamGetCtx(CUstream h, CUcontext* pctx, bool pt) {
  return StreamField(h, pctx, pt, [](const CUstream_st& s) { return s.ctx; });
}

CUresult StreamGetId(CUstream h, unsigned long long* id, bool pt) {
  return StreamField(h, id, pt, [](const CUstream_st& s) { return s.id; });
}

// Events (g_events): shared so that a record still queued keeps a destroyed event alive.

std::shared_ptr<CUevent_st> FindEvent(CUevent e) {
  std::lock_guard<std::mutex> g(g_events_mu);
  auto it = g_events.find(e);
  if (it != g_events.end()) return it->second;
  ReportDeadEventLocked(e);
  return nullptr;
}

CUresult StreamWaitEvent(CUstream h, CUevent e, unsigned flags, bool pt) {
  REQUIRE_INIT(d);
  if (flags > CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  auto ev = FindEvent(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  std::vector<Dep> deps;
  {
    std::lock_guard<std::mutex> g(ev->m);
    if (ev->stream) deps.push_back({ev->stream, ev->seq});
  }
  Enqueue(s, nullptr, std::move(deps));
  return CUDA_SUCCESS;
}

CUresult EventRecord(CUevent e, CUstream h, bool pt) {
  REQUIRE_INIT(d);
  auto ev = FindEvent(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  std::lock_guard<std::mutex> g(ev->m);
  uint64_t gen = ++ev->generation;
  ev->time_ns = 0;
  ev->stream = s;
  ev->seq = Enqueue(s, [ev, gen] {
    std::lock_guard<std::mutex> lg(ev->m);
    if (ev->generation == gen) ev->time_ns = gslice::MonotonicNs();
  });
  return CUDA_SUCCESS;
}
}  // namespace

STREAM_ENTRY(cuStreamSynchronize, _ptsz, (CUstream h), [&](bool pt) { return StreamSynchronize(h, pt); })
STREAM_ENTRY(cuStreamQuery, _ptsz, (CUstream h), [&](bool pt) { return StreamQuery(h, pt); })
STREAM_ENTRY(cuStreamGetPriority, _ptsz, (CUstream h, int* p), [&](bool pt) { return StreamGetPriority(h, p, pt); })
STREAM_ENTRY(cuStreamSetAttribute, _ptsz, (CUstream h, CUstreamAttrID a, const CUstreamAttrValue* v),
             [&](bool pt) { return StreamSetAttribute(h, a, v, pt); })
STREAM_ENTRY(cuStreamGetAttribute, _ptsz, (CUstream h, CUstreamAttrID a, CUstreamAttrValue* v),
             [&](bool pt) { return StreamGetAttribute(h, a, v, pt); })
STREAM_ENTRY(cuStreamGetFlags, _ptsz, (CUstream h, unsigned int* f), [&](bool pt) { return StreamGetFlags(h, f, pt); })
STREAM_ENTRY(cuStreamGetCtx, _ptsz, (CUstream h, CUcontext* c), [&](bool pt) { return StreamGetCtx(h, c, pt); })
STREAM_ENTRY(cuStreamGetId, _ptsz, (CUstream h, unsigned long long* id), [&](bool pt) { return StreamGetId(h, id, pt); })
STREAM_ENTRY(cuStreamWaitEvent, _ptsz, (CUstream h, CUevent e, unsigned int f), [&](bool pt) { return StreamWaitEvent(h, e, f, pt); })
STREAM_ENTRY(cuEventRecord, _ptsz, (CUevent e, CUstream h), [&](bool pt) { return EventRecord(e, h, pt); })
// CU_EVENT_RECORD_EXTERNAL only matters inside graphs, which the sim does not edit.
STREAM_ENTRY(cuEventRecordWithFlags, _ptsz, (CUevent e, CUstream h, unsigned int flags),
             [&](bool pt) { return flags > CU_EVENT_RECORD_EXTERNAL ? CUDA_ERROR_INVALID_VALUE : EventRecord(e, h, pt); })

// ---- context limits and cache preference: stored per context, not enforced ----

GSLICE_SIM_EXPORT CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (value == nullptr || limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(ctx->m);
  *value = ctx->limits[limit];
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  // The shared-memory and CIG limits are queried only.
  if (limit < 0 || limit >= CU_LIMIT_SHMEM_SIZE) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(ctx->m);
  ctx->limits[limit] = value;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(ctx->m);
  *config = ctx->cache_config;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> g(ctx->m);
  ctx->cache_config = config;
  return CUDA_SUCCESS;
}

// ---- events ----

GSLICE_SIM_EXPORT CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  if ((flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  REQUIRE_CONTEXT(ctx);
  auto ev = std::make_shared<CUevent_st>();
  ev->flags = flags;
  ev->ctx = ctx;
  std::lock_guard<std::mutex> g(g_events_mu);
  g_events[ev.get()] = ev;
  *ph = ev.get();
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_events_mu);
  if (g_events.erase(e) == 0) {
    ReportDeadEventLocked(e);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuEventQuery(CUevent e) {
  REQUIRE_INIT(d);
  auto ev = FindEvent(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(ev->m);
  if (!ev->stream || ev->stream->Done(ev->seq)) return CUDA_SUCCESS;
  return CUDA_ERROR_NOT_READY;
}

GSLICE_SIM_EXPORT CUresult cuEventSynchronize(CUevent e) {
  REQUIRE_INIT(d);
  auto ev = FindEvent(e);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  ApiGate gate;
  std::shared_ptr<CUstream_st> s;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> g(ev->m);
    s = ev->stream;
    seq = ev->seq;
  }
  if (s) s->WaitFor(seq);
  TrimPoolsToThreshold();
  return s ? static_cast<CUresult>(s->ctx->sticky_error.load()) : CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  auto a = FindEvent(start), b = FindEvent(end);
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
  std::scoped_lock g(a->m, b->m);
  if (!a->stream || !b->stream) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->stream->Done(a->seq) || !b->stream->Done(b->seq)) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>((static_cast<double>(b->time_ns) - static_cast<double>(a->time_ns)) / 1e6);
  return CUDA_SUCCESS;
}

#undef cuEventElapsedTime
GSLICE_SIM_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

// ---- capture status and host functions ----

namespace {
CUresult StreamIsCapturing(CUstream h, CUstreamCaptureStatus* status, bool pt) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(s->ctx->m);
  *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult LaunchHostFunc(CUstream h, CUhostFn fn, void* user_data, bool pt) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  Enqueue(s, [fn, user_data] { fn(user_data); });
  return CUDA_SUCCESS;
}

// A stream callback gets the stream and the context's error, if any.
CUresult StreamAddCallback(CUstream h, CUstreamCallback fn, void* user_data, unsigned flags, bool pt) {
  if (fn == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  CUctx_st* ctx = s->ctx;
  Enqueue(s, [fn, h, user_data, ctx] { fn(h, static_cast<CUresult>(ctx->sticky_error.load()), user_data); });
  return CUDA_SUCCESS;
}

// Stream memory operations on device words: a write, or a wait until the word compares.
template <typename T>
CUresult StreamWriteValue(CUstream h, CUdeviceptr addr, T value, unsigned flags, bool pt) {
  REQUIRE_INIT(d);
  if (addr % sizeof(T) != 0 || (flags & ~static_cast<unsigned>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0 ||
      !DeviceRangeValid(addr, sizeof(T))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  Enqueue(s, [addr, value] {
    __atomic_store_n(reinterpret_cast<T*>(addr), value, __ATOMIC_RELEASE);
  });
  return CUDA_SUCCESS;
}

template <typename T>
CUresult StreamWaitValue(CUstream h, CUdeviceptr addr, T value, unsigned flags, bool pt) {
  REQUIRE_INIT(d);
  const unsigned how = flags & 0x3u;  // GEQ, EQ, AND, NOR
  if (addr % sizeof(T) != 0 || (flags & ~(0x3u | CU_STREAM_WAIT_VALUE_FLUSH)) != 0 ||
      !DeviceRangeValid(addr, sizeof(T))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  Enqueue(s, [addr, value, how] {
    for (;;) {
      const T v = __atomic_load_n(reinterpret_cast<const T*>(addr), __ATOMIC_ACQUIRE);
      const bool met = how == CU_STREAM_WAIT_VALUE_GEQ  ? static_cast<std::make_signed_t<T>>(v - value) >= 0
                       : how == CU_STREAM_WAIT_VALUE_EQ ? v == value
                       : how == CU_STREAM_WAIT_VALUE_AND ? (v & value) != 0
                                                         : (~(v | value)) != 0;
      if (met) return;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  return CUDA_SUCCESS;
}
}  // namespace

STREAM_ENTRY(cuStreamIsCapturing, _ptsz, (CUstream h, CUstreamCaptureStatus* st), [&](bool pt) { return StreamIsCapturing(h, st, pt); })
STREAM_ENTRY(cuLaunchHostFunc, _ptsz, (CUstream h, CUhostFn fn, void* user_data), [&](bool pt) { return LaunchHostFunc(h, fn, user_data, pt); })
STREAM_ENTRY(cuStreamAddCallback, _ptsz, (CUstream h, CUstreamCallback fn, void* user_data, unsigned int flags),
             [&](bool pt) { return StreamAddCallback(h, fn, user_data, flags, pt); })
STREAM_ENTRY(cuStreamWriteValue32_v2, _ptsz, (CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
             [&](bool pt) { return StreamWriteValue<cuuint32_t>(h, addr, value, flags, pt); })
STREAM_ENTRY(cuStreamWriteValue64_v2, _ptsz, (CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
             [&](bool pt) { return StreamWriteValue<cuuint64_t>(h, addr, value, flags, pt); })
STREAM_ENTRY(cuStreamWaitValue32_v2, _ptsz, (CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
             [&](bool pt) { return StreamWaitValue<cuuint32_t>(h, addr, value, flags, pt); })
STREAM_ENTRY(cuStreamWaitValue64_v2, _ptsz, (CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
             [&](bool pt) { return StreamWaitValue<cuuint64_t>(h, addr, value, flags, pt); })
