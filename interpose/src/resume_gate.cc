#include "resume_gate.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "gslice/clock.h"
#include "gslice/ledger.h"
#include "gslice/options.h"
#include "cuda_exports.h"
#include "log.h"
#include "trace_recorder.h"

namespace gslice::shim {
namespace gate_detail {

std::atomic<SuspendShimEntry*> g_entry{nullptr};
std::atomic<bool> g_disabled{false};
// Where gslice_cuda_gate_word points before the first gated call, and without a board.
constinit std::atomic<uint32_t> g_unclaimed_word{kGateClosed};
constinit std::atomic<uint32_t> g_open_word{kGateOpen};

namespace {

// Never destroyed: hooks may run during exit.
alignas(SuspendShimBoard) unsigned char g_board_storage[sizeof(SuspendShimBoard)];
SuspendShimBoard* g_board = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
pthread_mutex_t g_attach_mu = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int64_t> g_last_attach_ns{0};

void InitOnce() {
  g_board = new (g_board_storage) SuspendShimBoard();
  const char* path = OptionValue(Option::SuspendBoard);
  const char* partition = OptionValue(Option::SuspendPartition);
  std::string error;
  if (path == nullptr || *path == '\0' || !g_board->Open(path, partition, &error)) {
    // No board is the normal case without gsliced (ENOTDIR: an older gslice's one-file board,
    // whose service cannot serve us either); an untrusted one is worth a warning.
    const bool missing = errno == ENOENT || errno == ENOTDIR;
    Log(missing ? LogLevel::kDebug : LogLevel::kWarn, "resume gate off: %s", error.c_str());
    gslice_cuda_gate_word.store(&g_open_word, std::memory_order_release);
    g_disabled.store(true, std::memory_order_relaxed);
    return;
  }
  if (!g_board->notice().empty()) Log(LogLevel::kWarn, "suspend board: %s", g_board->notice().c_str());
  const uint32_t pid = static_cast<uint32_t>(getpid());
  SuspendShimEntry* e = g_board->Claim(pid, ProcessStartTime(pid));
  if (e == nullptr) {
    Log(LogLevel::kWarn, "resume gate off: partition %s of the suspend board %s is full", g_board->partition_name(),
        path);
    gslice_cuda_gate_word.store(&g_open_word, std::memory_order_release);
    g_disabled.store(true, std::memory_order_relaxed);
    return;
  }
  if (g_board->attached()) e->attached.store(1, std::memory_order_release);
  gslice_cuda_gate_word.store(g_board->GateWord(*e), std::memory_order_release);
  g_entry.store(e, std::memory_order_release);
  // The service makes this partition's gates when it sees it: let it look now.
  if (!g_board->attached()) g_board->RingDoorbell();
}

// Maps the gates file once the service made it and points the gate there. At most one try
// per 50 ms (unless force): until it exists, every call of a process whose attach word is
// closed comes here.
bool TryAttach(SuspendShimEntry* e, bool force) {
  if (g_board->attached()) return true;
  const int64_t now = MonotonicNs();
  if (!force && now - g_last_attach_ns.load(std::memory_order_relaxed) < 50'000'000) return false;
  pthread_mutex_lock(&g_attach_mu);
  g_last_attach_ns.store(now, std::memory_order_relaxed);
  const bool ok = g_board->Attach();
  if (ok) {
    e->attached.store(1, std::memory_order_release);
    gslice_cuda_gate_word.store(g_board->GateWord(*e), std::memory_order_release);
  }
  pthread_mutex_unlock(&g_attach_mu);
  return ok;
}

}  // namespace

SuspendShimEntry* Init() {
  pthread_once(&g_once, InitOnce);
  return g_entry.load(std::memory_order_acquire);
}

void Wait(SuspendShimEntry* e) { WaitFor(e, nullptr); }

void WaitFor(SuspendShimEntry* e, const char* call) {
  // A closed attach word: the service has made (or is about to make) our gates.
  if (!TryAttach(e, false)) return;
  const SuspendGateEntry* g = g_board->GateOf(*e);
  const uint64_t me = e->owner.load(std::memory_order_relaxed);
  // A gate that still speaks to this entry's previous owner does not stop us.
  auto closed_for_us = [&] {
    return g->owner.load(std::memory_order_acquire) == me && g->gate.load(std::memory_order_acquire) != kGateOpen;
  };
  if (!closed_for_us()) return;
  // Ask for a resume; the service decides whether this suspension resumes on demand (idle
  // reclaim) or waits for memory or an operator.
  if (e->resume_request.exchange(1, std::memory_order_acq_rel) == 0) {
    Log(LogLevel::kInfo, "process suspended by gsliced: this call waits for the resume");
  }
  g_board->RingDoorbell();
  const int64_t waited_from = gslice::trace::NowNs();
  int rounds = 0;
  while (closed_for_us()) {
    FutexWait(&g->gate, kGateClosed, 200);
    // Re-ring now and then: a wake-up can be lost (the service cannot see us change its
    // word), and a restarted service missed the first one.
    if (++rounds % 5 == 0) g_board->RingDoorbell();
  }
  e->resume_request.store(0, std::memory_order_release);
  if (gslice::trace::Recording()) gslice::trace::Suspended(call, waited_from, gslice::trace::NowNs());
}

}  // namespace gate_detail

bool MayRequestPreemption() {
  const char* cls = OptionValue(Option::Class);
  return cls == nullptr || *cls == '\0' || std::strcmp(cls, "guaranteed") == 0;
}

bool RequestPreemption(const uint8_t gpu_uuid[16], uint64_t bytes) {
  SuspendShimEntry* e = gate_detail::Init();
  SuspendShimBoard* board = gate_detail::g_board;
  if (e == nullptr || board == nullptr) return false;
  // The service may live in another pid namespace (gsliced on the host, this process in a
  // container): its heartbeat on the board says whether it is alive.
  if (!board->ServiceAlive()) return false;
  // The answer comes in our gates: give the service a moment to make them.
  for (int i = 0; i < 20 && !gate_detail::TryAttach(e, true); ++i) {
    board->RingDoorbell();
    usleep(50'000);
  }
  const SuspendGateEntry* g = board->GateOf(*e);
  if (g == nullptr) return false;
  const uint64_t me = e->owner.load(std::memory_order_relaxed);
  // One request at a time per process (allocations from several threads take turns).
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&mu);
  std::memcpy(e->mem_request_gpu, gpu_uuid, 16);
  e->mem_request_bytes.store(bytes, std::memory_order_relaxed);
  const uint64_t seq = e->mem_request_seq.load(std::memory_order_relaxed) + 1;
  e->mem_request_seq.store(seq, std::memory_order_release);
  board->RingDoorbell();
  Log(LogLevel::kInfo, "allocation of %llu bytes failed: asking gsliced to preempt opportunistic work",
      static_cast<unsigned long long>(bytes));
  // Suspending opportunistic processes moves their memory to the host: seconds for tens of
  // GiB. Wait up to two minutes, checking that the service is still there.
  bool freed = false;
  const int64_t deadline = MonotonicNs() + 120'000'000'000LL;
  while (MonotonicNs() < deadline) {
    const uint32_t reply = g->mem_reply.load(std::memory_order_acquire);
    if (g->owner.load(std::memory_order_acquire) == me && g->mem_reply_seq.load(std::memory_order_acquire) == seq) {
      freed = g->mem_reply.load(std::memory_order_acquire) == kMemReplyFreed;
      break;
    }
    FutexWait(&g->mem_reply, reply, 100);
    if (!board->ServiceAlive()) break;
  }
  pthread_mutex_unlock(&mu);
  Log(LogLevel::kInfo, "preemption %s", freed ? "freed memory: retrying the allocation" : "could not free memory");
  return freed;
}

}  // namespace gslice::shim

static_assert(gslice::kGateOpen == 0, "gen_exports.py's trampolines compare the gate word with 0");
static_assert(sizeof(std::atomic<const std::atomic<uint32_t>*>) == sizeof(void*));

std::atomic<const std::atomic<uint32_t>*> gslice_cuda_gate_word{&gslice::shim::gate_detail::g_unclaimed_word};

// The trampolines' slow path: the first gated call claims the entry; later ones come here only
// while the gate word is closed. No argument is needed but the slot, kept for debugging.
void gslice_cuda_gate_wait(int slot) {
  using namespace gslice::shim::gate_detail;
  gslice::SuspendShimEntry* e = Init();
  if (e != nullptr && gslice_cuda_gate_word.load(std::memory_order_acquire)->load(std::memory_order_acquire) != gslice::kGateOpen) {
    namespace ex = gslice::cuda_exports;
    WaitFor(e, slot >= 0 && slot < ex::kCount ? ex::kNames[slot] : nullptr);
  }
}
