// The forwarding libcuda.so.1's exports: every symbol of the driver's export list is a
// generated trampoline (interpose/gen_exports.py, prefix remote) whose slot is filled here,
// once, when the library loads: with the client's function for the calls of calls.def
// (generated forwarding, local answers, custom calls), and for every other export with a
// function that logs the call's name once and returns CUDA_ERROR_NOT_SUPPORTED.
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <utility>

#include "call.h"
#include "call_hooks.h"
#include "connection.h"
#include "context_stack.h"
#include "deferred_copies.h"
#include "host_memory.h"
#include "image_size.h"
#include "refusals.h"
#include "remote_exports.h"
#include "sizes.h"

// Buffer sizes in calls.def's expressions, for the generated functions (global scope).
using gslice::remote::ArrayBytes;
using gslice::remote::MemPoolAttributeSize;
using gslice::remote::CountedBytes;
using gslice::remote::PointerAttributeSize;

#include "client_calls.inc"

namespace gslice::remote {
namespace {

using remote_exports::kCount;

std::atomic<bool> g_reported[kCount];

CUresult NotForwardedSlot(int slot) {
  if (!g_reported[slot].exchange(true, std::memory_order_relaxed)) return NotForwarded(remote_exports::kNames[slot]);
  return CUDA_ERROR_NOT_SUPPORTED;
}

// One function per slot, so that the call's name is known; arguments are ignored (the SysV
// ABI lets a callee ignore what the caller passed).
template <int Slot>
CUresult NotForwardedAt() {
  return NotForwardedSlot(Slot);
}

template <int... Slots>
auto MakeNotForwarded(std::integer_sequence<int, Slots...>) {
  return std::array<void*, sizeof...(Slots)>{reinterpret_cast<void*>(&NotForwardedAt<Slots>)...};
}

void* FindClientCall(const char* name) {
  for (const ClientCall& c : kClientCalls)
    if (strcmp(c.name, name) == 0) return c.fn;
  return nullptr;
}

const std::array<void*, kCount>& NotForwardedTable() {
  static const auto table = MakeNotForwarded(std::make_integer_sequence<int, kCount>{});
  return table;
}

int FindExport(const char* name) {
  int lo = 0, hi = kCount - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    const int c = strcmp(remote_exports::kNames[mid], name);
    if (c == 0) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

__attribute__((constructor)) void FillSlots() {
  const auto& not_forwarded = NotForwardedTable();
  for (int i = 0; i < kCount; ++i) {
    void* fn = FindClientCall(remote_exports::kNames[i]);
    gslice_remote_slots[i] = fn != nullptr ? fn : not_forwarded[static_cast<size_t>(i)];
  }
}

}  // namespace

// The client's own trampoline for an exported symbol (what cuGetProcAddress hands out), or
// nullptr when the client does not export it.
void* ExportedEntry(const char* name) {
  const int slot = FindExport(name);
  return slot < 0 ? nullptr : gslice_remote_entries[slot];
}

// For an entry point the server's driver does not have: the export of that name or its newest
// _vN form - the client's own function when calls.def answers it on the client (it needs no
// driver), else one that logs the call's name once and returns CUDA_ERROR_NOT_SUPPORTED;
// nullptr when the client exports neither.
void* LocalOrNotForwardedEntry(const char* name) {
  int slot = FindExport(name);
  char versioned[256];
  for (int v = 9; slot < 0 && v >= 2; --v) {
    if (snprintf(versioned, sizeof versioned, "%s_v%d", name, v) < static_cast<int>(sizeof versioned)) {
      slot = FindExport(versioned);
    }
  }
  if (slot < 0) return nullptr;
  for (uint32_t op = 0; op < kOpCount; ++op) {
    if (kOpKinds[op] == CallKind::kLocal && strcmp(kOpNames[op], remote_exports::kNames[slot]) == 0) {
      return gslice_remote_entries[slot];
    }
  }
  return NotForwardedTable()[static_cast<size_t>(slot)];
}

}  // namespace gslice::remote
