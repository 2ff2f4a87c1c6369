// The resume gate: the shim's side of suspend/resume (docs/suspend.md). While gsliced's
// suspend service has the process suspended (or is suspending or resuming it), a driver call
// waits here - it asks for a transparent resume when the suspension was for idleness, and
// simply waits out a preemption or a manual suspend - and then proceeds: the program sees a
// delay, never an error.
//
// Two ways in, one gate word (gslice_cuda_gate_word points at it; the service alone writes it,
// and the shim maps it read-only):
//  - Every exported libcuda function passes it in its trampoline (interpose/gen_exports.py),
//    hooked or not, and so does every function cuGetProcAddress hands out, except the few
//    that interpose/ungated.def names and reasons for. Fast path: one load of
//    gslice_cuda_gate_word and one relaxed load of the word it points to; a word that is not
//    open sends the call to gslice_cuda_gate_wait (below), which claims the entry or waits.
//  - Hooks that do GPU work also call ResumeGate(): one relaxed store (activity, for idle
//    detection in this process's partition of the suspend board) and one acquire load of the
//    gate word. Polling hooks call ResumeGateQuiet().
// The entry is claimed lazily on the first gated call; without a board (none made on this
// node, GSLICE_SUSPEND_BOARD unusable or untrusted) the word is always open. Until the service
// has made this partition's gates, the gate word is the board's attach word: open, or closed
// while the service wants such processes to look for their gates.
#pragma once

#include <atomic>
#include <cstdint>

#include "gslice/suspend_board.h"

namespace gslice::shim {

namespace gate_detail {
extern std::atomic<SuspendShimEntry*> g_entry;
extern std::atomic<bool> g_disabled;
// Claims this process's entry once (nullptr: no board, or it is full) and points
// gslice_cuda_gate_word at its gate (at a word that is always open when there is none);
// the word is set before the entry is published.
SuspendShimEntry* Init();
void Wait(SuspendShimEntry* e);
// The same for the driver function `call` (nullptr: unknown), named in the timeline's
// "suspended" event when recording.
void WaitFor(SuspendShimEntry* e, const char* call);
}  // namespace gate_detail

}  // namespace gslice::shim

// The trampolines' side (gen_exports.py emits the code that uses them). gslice_cuda_gate_word
// points at a word that is kGateOpen (0) while calls may pass: until the first gated call at a
// closed one, so that call claims the entry on the slow path. gslice_cuda_gate_wait runs on
// the slow path with the caller's arguments saved; it returns once the call may proceed.
extern "C" __attribute__((visibility("hidden"))) std::atomic<const std::atomic<uint32_t>*> gslice_cuda_gate_word;
extern "C" __attribute__((visibility("hidden"))) void gslice_cuda_gate_wait(int slot);

namespace gslice::shim {

inline void ResumeGate() {
  SuspendShimEntry* e = gate_detail::g_entry.load(std::memory_order_acquire);
  if (e == nullptr) {
    if (gate_detail::g_disabled.load(std::memory_order_relaxed)) return;
    e = gate_detail::Init();
    if (e == nullptr) return;
  }
  // Only "has it moved since the last look" matters to the service, so a racy increment
  // (lost updates between threads) is fine and costs no locked instruction.
  e->activity.store(e->activity.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (gslice_cuda_gate_word.load(std::memory_order_acquire)->load(std::memory_order_acquire) != kGateOpen) {
    gate_detail::Wait(e);
  }
}

// The same without counting as activity (polling calls: event and stream queries).
inline void ResumeGateQuiet() {
  SuspendShimEntry* e = gate_detail::g_entry.load(std::memory_order_acquire);
  if (e == nullptr) {
    if (gate_detail::g_disabled.load(std::memory_order_relaxed)) return;
    e = gate_detail::Init();
    if (e == nullptr) return;
  }
  if (gslice_cuda_gate_word.load(std::memory_order_acquire)->load(std::memory_order_acquire) != kGateOpen) {
    gate_detail::Wait(e);
  }
}

// A guaranteed process's allocation of `bytes` on the GPU with this UUID failed with
// CUDA_ERROR_OUT_OF_MEMORY although its slice had room: asks the suspend service to
// preempt opportunistic work there and waits for the answer (at most GSLICE's preemption
// timeout). True: memory was freed, retry once. False: no service, refused, or timed out -
// the caller returns CUDA_ERROR_OUT_OF_MEMORY as it would have.
bool RequestPreemption(const uint8_t gpu_uuid[16], uint64_t bytes);

// True when this process may ask for preemption (its class is guaranteed).
bool MayRequestPreemption();

}  // namespace gslice::shim

#include <cuda.h>

namespace gslice::shim {

// For allocation hooks: when `first` is CUDA_ERROR_OUT_OF_MEMORY and this process may ask
// for preemption, asks once for `bytes` on the current device and, if memory was freed,
// returns alloc() (the retried call); otherwise returns `first`.
template <typename Alloc>
CUresult RetryAfterPreemption(CUresult first, uint64_t bytes, Alloc alloc) {
  if (first != CUDA_ERROR_OUT_OF_MEMORY || !MayRequestPreemption()) return first;
  CUdevice dev = -1;
  CUuuid uuid;
  if (cuCtxGetDevice(&dev) != CUDA_SUCCESS || cuDeviceGetUuid(&uuid, dev) != CUDA_SUCCESS) return first;
  if (!RequestPreemption(reinterpret_cast<const uint8_t*>(uuid.bytes), bytes)) return first;
  return alloc();
}

}  // namespace gslice::shim
