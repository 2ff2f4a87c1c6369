#include "resume_gate.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "gslice/ledger.h"
#include "gslice/options.h"
#include "log.h"

namespace gslice::shim {
namespace gate_detail {

std::atomic<SuspendBoardEntry*> g_entry{nullptr};
std::atomic<bool> g_disabled{false};

namespace {

// Never destroyed: hooks may run during exit.
alignas(SuspendBoard) unsigned char g_board_storage[sizeof(SuspendBoard)];
SuspendBoard* g_board = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void InitOnce() {
  g_board = new (g_board_storage) SuspendBoard();
  const char* path = OptionValue(Option::SuspendBoard);
  if (path == nullptr || *path == '\0' || !g_board->Open(path)) {
    Log(LogLevel::kDebug, "resume gate off: cannot map the suspend board %s", path ? path : "");
    g_disabled.store(true, std::memory_order_relaxed);
    return;
  }
  const uint32_t pid = static_cast<uint32_t>(getpid());
  SuspendBoardEntry* e = g_board->Claim(pid, ProcessStartTime(pid));
  if (e == nullptr) {
    Log(LogLevel::kWarn, "resume gate off: the suspend board %s is full", path);
    g_disabled.store(true, std::memory_order_relaxed);
    return;
  }
  g_entry.store(e, std::memory_order_release);
}

}  // namespace

// Where gslice_cuda_gate_word points before the first gated call, and without a board.
constinit std::atomic<uint32_t> g_unclaimed_word{kGateClosed};
constinit std::atomic<uint32_t> g_open_word{kGateOpen};

SuspendBoardEntry* Init() {
  pthread_once(&g_once, InitOnce);
  SuspendBoardEntry* e = g_entry.load(std::memory_order_acquire);
  gslice_cuda_gate_word.store(e != nullptr ? &e->gate : &g_open_word, std::memory_order_release);
  return e;
}

void Wait(SuspendBoardEntry* e) {
  // Ask for a resume; the service decides whether this suspension resumes on demand (idle
  // reclaim) or waits for memory or an operator.
  if (e->resume_request.exchange(1, std::memory_order_acq_rel) == 0) {
    Log(LogLevel::kInfo, "process suspended by gsliced: this call waits for the resume");
  }
  RingDoorbell(g_board != nullptr ? g_board->layout() : nullptr);
  int rounds = 0;
  while (e->gate.load(std::memory_order_acquire) != kGateOpen) {
    FutexWait(&e->gate, kGateClosed, 200);
    // Re-ring now and then in case the service restarted and missed the first one.
    if (++rounds % 25 == 0) RingDoorbell(g_board != nullptr ? g_board->layout() : nullptr);
  }
}

}  // namespace gate_detail

bool MayRequestPreemption() {
  const char* cls = OptionValue(Option::Class);
  return cls == nullptr || *cls == '\0' || std::strcmp(cls, "guaranteed") == 0;
}

bool RequestPreemption(const uint8_t gpu_uuid[16], uint64_t bytes) {
  SuspendBoardEntry* e = gate_detail::Init();
  if (e == nullptr || gate_detail::g_board == nullptr) return false;
  SuspendBoardLayout* board = gate_detail::g_board->layout();
  // The service may live in another pid namespace (gsliced on the host, this process in a
  // container): its lock byte on the board says whether it is alive.
  if (!gate_detail::g_board->ServiceAlive()) return false;
  // One request at a time per process (allocations from several threads take turns).
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&mu);
  std::memcpy(e->mem_request_gpu, gpu_uuid, 16);
  e->mem_request_bytes.store(bytes, std::memory_order_relaxed);
  e->mem_reply.store(0, std::memory_order_relaxed);
  const uint64_t seq = e->mem_request_seq.load(std::memory_order_relaxed) + 1;
  e->mem_request_seq.store(seq, std::memory_order_release);
  RingDoorbell(board);
  Log(LogLevel::kInfo, "allocation of %llu bytes failed: asking gsliced to preempt opportunistic work",
      static_cast<unsigned long long>(bytes));
  // Suspending opportunistic processes moves their memory to the host: seconds for tens of
  // GiB. Wait up to two minutes, checking that the service is still there.
  bool freed = false;
  const int64_t deadline = MonotonicNs() + 120'000'000'000LL;
  while (MonotonicNs() < deadline) {
    if (e->mem_reply_seq.load(std::memory_order_acquire) == seq) {
      freed = e->mem_reply.load(std::memory_order_acquire) == kMemReplyFreed;
      break;
    }
    FutexWait(&e->mem_reply, 0, 100);
    if (!gate_detail::g_board->ServiceAlive()) break;
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
// while the gate is closed. No argument is needed but the slot, kept for debugging.
void gslice_cuda_gate_wait(int /*slot*/) {
  using namespace gslice::shim::gate_detail;
  gslice::SuspendBoardEntry* e = Init();
  if (e != nullptr && e->gate.load(std::memory_order_acquire) != gslice::kGateOpen) Wait(e);
}
