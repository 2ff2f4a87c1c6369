#include "gslice/shrink_guard.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>

namespace gslice {
namespace {

// A range's start is published last (release) and cleared first, so the handler, which
// reads start before len, never pairs a start with the length of another range: an entry is
// reused only after UnguardMapping, whose REQUIRES rules out a fault in the old range then.
struct GuardedRange {
  std::atomic<uintptr_t> start{0};  // 0: free; 1: being filled in
  std::atomic<size_t> len{0};
  std::atomic<int> prot{0};
  std::atomic<bool> shrunk{false};
};

constexpr uintptr_t kFilling = 1;

GuardedRange g_ranges[kMaxGuardedRanges];  // trivially constructed atomics: no constructor runs
std::atomic<int> g_high_water{0};          // entries [0, high_water) may be in use
std::atomic<bool> g_installed{false};
std::atomic<long> g_shrunk_count{0};
struct sigaction g_previous;  // written once, before the handler is installed

void PassOn(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action (an ignored SIGBUS from a fault is fatal too): restore it. A fault
  // happens again as the instruction re-runs and kills the process as it would have; a
  // SIGBUS that was sent is raised again, delivered once this handler returns.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(SIGBUS);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // si_code > 0: raised by the kernel for a fault (BUS_ADRERR for a page past a file's end).
  if (info != nullptr && info->si_code > 0) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
    const int n = g_high_water.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      GuardedRange& r = g_ranges[i];
      const uintptr_t start = r.start.load(std::memory_order_acquire);
      if (start <= kFilling) continue;
      const size_t len = r.len.load(std::memory_order_relaxed);
      if (at < start || at - start >= len) continue;
      void* p = mmap(reinterpret_cast<void*>(start), len, r.prot.load(std::memory_order_relaxed),
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p == MAP_FAILED) break;  // cannot repair: die as before
      r.shrunk.store(true, std::memory_order_release);
      g_shrunk_count.fetch_add(1, std::memory_order_relaxed);
      errno = saved_errno;
      return;
    }
  }
  PassOn(sig, info, context);
  errno = saved_errno;
}

std::atomic<int> g_state{0};  // 0 not yet, 1 installing, 2 installed, 3 failed or forbidden

}  // namespace

void ForbidShrinkGuard() {
  int expected = 0;
  if (g_state.compare_exchange_strong(expected, 3)) return;
  while (expected == 1) expected = g_state.load();
  if (expected == 2 && g_state.compare_exchange_strong(expected, 3)) {  // installed (before a fork): undo
    g_installed.store(false, std::memory_order_release);
    sigaction(SIGBUS, &g_previous, nullptr);
  }
}

bool InstallShrinkGuard() {
  std::atomic<int>& state = g_state;
  int expected = 0;
  if (!state.compare_exchange_strong(expected, 1)) {
    while (state.load() == 1) {
    }
    return state.load() == 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  memset(&g_previous, 0, sizeof g_previous);
  const bool ok = sigaction(SIGBUS, &sa, &g_previous) == 0;
  g_installed.store(ok, std::memory_order_release);
  state.store(ok ? 2 : 3);
  return ok;
}

bool ShrinkGuardInstalled() { return g_installed.load(std::memory_order_acquire); }

int GuardMapping(void* addr, size_t len, int prot) {
  if (!ShrinkGuardInstalled() || addr == nullptr || len == 0) return -1;
  for (int i = 0; i < kMaxGuardedRanges; ++i) {
    GuardedRange& r = g_ranges[i];
    uintptr_t free_start = 0;
    if (!r.start.compare_exchange_strong(free_start, kFilling, std::memory_order_acq_rel)) continue;
    r.len.store(len, std::memory_order_relaxed);
    r.prot.store(prot, std::memory_order_relaxed);
    r.shrunk.store(false, std::memory_order_relaxed);
    int hw = g_high_water.load(std::memory_order_relaxed);
    while (hw < i + 1 && !g_high_water.compare_exchange_weak(hw, i + 1, std::memory_order_acq_rel)) {
    }
    r.start.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_release);
    return i;
  }
  return -1;
}

void UnguardMapping(int id) {
  if (id < 0 || id >= kMaxGuardedRanges) return;
  g_ranges[id].start.store(0, std::memory_order_release);
}

bool MappingShrunk(int id) {
  if (id < 0 || id >= kMaxGuardedRanges) return false;
  return g_ranges[id].shrunk.load(std::memory_order_acquire);
}

long ShrunkMappingCount() { return g_shrunk_count.load(std::memory_order_relaxed); }

}  // namespace gslice
